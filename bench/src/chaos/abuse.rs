//! `stead bench chaos --fault none --abuse`: attackers beside the normal workload on a keyed
//! server (docs/benchmarks.md). One has no credential: it opens MCP sessions and
//! streams, trickles request bodies, sends oversized ones and forges node signatures. One
//! holds a session token: it fills its session with every-second schedules, floods waiting
//! messages, loops WebSocket resumes and knocks on operator routes. Each window checks that
//! the limits held (the attacked session's queue, its schedule firings); the run's windows
//! show the server's memory, and the workload's own tallies show whether a legitimate request
//! failed.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

use super::workload::Shared;

/// The operator key of the attacked server (the workload sends it; the attackers never do).
pub const OPERATOR_KEY: &str = "chaos-operator-key-0123456789abcdef";

/// Schedules the token holder makes, each every second.
const SCHEDULES: usize = 100;
/// Trickled bodies held open at once.
const SLOW_BODIES: usize = 16;
/// Waiting messages sent at once.
const WAITERS: usize = 32;

/// What the attackers were answered, by `attack status`.
#[derive(Default)]
pub struct Tally(Mutex<BTreeMap<String, u64>>);

impl Tally {
    fn count(&self, attack: &str, outcome: impl std::fmt::Display) {
        let mut tally = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *tally.entry(format!("{attack} {outcome}")).or_default() += 1;
    }

    pub fn take(&self) -> BTreeMap<String, u64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The attacked session: made by the operator, its token handed to the attacker.
pub struct Target {
    pub id: Uuid,
    started: Instant,
}

/// Creates the token holder's session and starts every attacker; they stop with the
/// workload (`shared.stop`).
pub async fn start(shared: Arc<Shared>, tally: Arc<Tally>) -> anyhow::Result<Target> {
    let created: Value = shared
        .http
        .post(format!("{}/v1/sessions", shared.base()))
        .json(&json!({ "agent": "chaos" }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id: Uuid = created["id"].as_str().unwrap_or_default().parse()?;
    let token = created["token"].as_str().unwrap_or_default().to_string();
    let target = Target {
        id,
        started: Instant::now(),
    };
    let anon = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    for n in 0..SCHEDULES {
        let answer = anon
            .post(format!("{}/v1/sessions/{id}/schedules", shared.base()))
            .bearer_auth(&token)
            .json(&json!({"key": format!("flood-{n}"), "message": {"text": "hello"}, "every_secs": 1}))
            .send()
            .await?;
        tally.count("token-schedule-create", answer.status().as_u16());
    }
    let spawn = |attack: Attack| {
        let (shared, tally, anon, token) =
            (shared.clone(), tally.clone(), anon.clone(), token.clone());
        tokio::spawn(async move {
            while !shared.stop.load(Ordering::Relaxed) {
                attack.once(&shared, &tally, &anon, id, &token).await;
            }
        });
    };
    for attack in [
        Attack::McpInitialize,
        Attack::McpStream,
        Attack::BigBody,
        Attack::ForgedNode,
        Attack::OperatorRoutes,
        Attack::ResumeLoop,
    ] {
        spawn(attack);
    }
    for _ in 0..SLOW_BODIES {
        spawn(Attack::SlowBody);
    }
    for _ in 0..WAITERS {
        spawn(Attack::Waiter);
    }
    Ok(target)
}

#[derive(Clone, Copy)]
enum Attack {
    McpInitialize,
    McpStream,
    SlowBody,
    BigBody,
    ForgedNode,
    OperatorRoutes,
    Waiter,
    ResumeLoop,
}

impl Attack {
    async fn once(
        self,
        shared: &Shared,
        tally: &Tally,
        anon: &reqwest::Client,
        id: Uuid,
        token: &str,
    ) {
        let base = shared.base();
        let status = |r: Result<reqwest::Response, reqwest::Error>| match r {
            Ok(r) => r.status().as_u16().to_string(),
            Err(e) if e.is_timeout() => "timeout".to_string(),
            Err(_) => "no-answer".to_string(),
        };
        match self {
            Attack::McpInitialize => {
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "abuse", "version": "0"}}});
                let r = anon
                    .post(format!("{base}/mcp"))
                    .header("accept", "application/json, text/event-stream")
                    .json(&body)
                    .send()
                    .await;
                tally.count("anon-mcp-initialize", status(r));
            }
            Attack::McpStream => {
                let r = anon
                    .get(format!("{base}/mcp"))
                    .header("accept", "text/event-stream")
                    .send()
                    .await;
                tally.count("anon-mcp-stream", status(r));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Attack::BigBody => {
                let r = anon
                    .post(format!("{base}/v1/chat/completions"))
                    .header("content-type", "application/json")
                    .body(vec![b' '; 4 << 20])
                    .send()
                    .await;
                tally.count("anon-4mib-body", status(r));
            }
            Attack::ForgedNode => {
                let r = anon
                    .get(format!("{base}/v1/sessions/{id}"))
                    .header("x-stead-node", "node-0")
                    .header(
                        "x-stead-node-time",
                        chrono::Utc::now().timestamp().to_string(),
                    )
                    .header("x-stead-node-signature", "00".repeat(32))
                    .send()
                    .await;
                tally.count("anon-forged-node", status(r));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Attack::OperatorRoutes => {
                for path in ["/v1/sessions", "/v1/gateway/logs", "/v1/approvals"] {
                    let r = anon
                        .get(format!("{base}{path}"))
                        .bearer_auth(token)
                        .send()
                        .await;
                    tally.count("token-operator-route", status(r));
                }
                let other = Uuid::now_v7();
                let r = anon
                    .get(format!("{base}/v1/sessions/{other}"))
                    .bearer_auth(token)
                    .send()
                    .await;
                tally.count("token-other-session", status(r));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Attack::Waiter => {
                let r = anon
                    .post(format!("{base}/v1/sessions/{id}/messages?wait=true"))
                    .bearer_auth(token)
                    .json(&json!({"text": "hello"}))
                    .send()
                    .await;
                tally.count("token-wait", status(r));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Attack::SlowBody => {
                let outcome = slow_body(base, id, token).await;
                tally.count("token-slow-body", outcome);
            }
            Attack::ResumeLoop => {
                let outcome = resume_loop(base, id, token).await;
                tally.count("token-resume", outcome);
            }
        }
    }
}

/// A message to the session whose body trickles a byte a second: how the server ended it
/// (its status, and after how many seconds, in fives).
async fn slow_body(base: &str, id: Uuid, token: &str) -> String {
    let address = base.trim_start_matches("http://");
    let Ok(mut stream) = tokio::net::TcpStream::connect(address).await else {
        tokio::time::sleep(Duration::from_millis(200)).await;
        return "no-connection".into();
    };
    let head = format!(
        "POST /v1/sessions/{id}/messages HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer \
         {token}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{{"
    );
    if stream.write_all(head.as_bytes()).await.is_err() {
        return "refused".into();
    }
    let started = Instant::now();
    let (mut reader, mut writer) = stream.into_split();
    let trickle = async {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if writer.write_all(b" ").await.is_err() {
                return;
            }
        }
    };
    let read = async {
        let mut answer = [0u8; 16];
        let n = reader.read(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer[..n]).into_owned())
    };
    let ended: String = tokio::select! {
        _ = trickle => "closed".into(),
        read = tokio::time::timeout(Duration::from_secs(120), read) => match read {
            Ok(Ok(head)) if head.len() >= 12 => head.get(9..12).unwrap_or("?").to_string(),
            Ok(_) => "closed".into(),
            Err(_) => "held-120s".into(),
        },
    };
    format!("{ended} after {}s", started.elapsed().as_secs() / 5 * 5)
}

/// A WebSocket of the session sending `resume {after_seq: 0}` every 100 ms for ten seconds:
/// `replayed` when a resume was answered with the journal, `rate_limited` when refused.
async fn resume_loop(base: &str, id: Uuid, token: &str) -> String {
    let url = format!(
        "{}/v1/sessions/{id}/ws",
        base.replacen("http://", "ws://", 1)
    );
    let Ok(mut request) = url.into_client_request() else {
        return "bad-url".into();
    };
    if let Ok(value) = format!("Bearer {token}").parse() {
        request.headers_mut().insert("authorization", value);
    }
    let Ok(Ok((mut socket, _))) = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(request),
    )
    .await
    else {
        tokio::time::sleep(Duration::from_millis(500)).await;
        return "no-connection".into();
    };
    let (mut resumes, mut refused) = (0u32, 0u32);
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let frame = json!({"type": "resume", "after_seq": 0}).to_string();
        if socket.send(Message::text(frame)).await.is_err() {
            break;
        }
        resumes += 1;
        let wait = tokio::time::sleep(Duration::from_millis(100));
        tokio::pin!(wait);
        loop {
            tokio::select! {
                () = &mut wait => break,
                next = socket.next() => match next {
                    Some(Ok(Message::Text(text))) => {
                        if text.contains("\"rate_limited\"") {
                            refused += 1;
                        }
                    }
                    Some(Ok(_)) => {}
                    _ => break,
                },
            }
        }
    }
    let _ = socket.close(None).await;
    format!(
        "refused {}%",
        u64::from(refused) * 100 / u64::from(resumes.max(1)) / 10 * 10
    )
}

/// What the limits allowed the attacked session so far: its queue and its schedules'
/// firings, as violations when over them.
pub async fn check(shared: &Shared, target: &Target) -> Vec<String> {
    let mut found = Vec::new();
    let base = shared.base();
    let session: Value = match shared
        .http
        .get(format!("{base}/v1/sessions/{}", target.id))
        .send()
        .await
    {
        Ok(answer) => answer.json().await.unwrap_or_default(),
        Err(error) => {
            return vec![format!(
                "abuse: the attacked session could not be read: {error}"
            )]
        }
    };
    let queued = session["queued_messages"].as_u64().unwrap_or(0);
    if queued > 32 {
        found.push(format!(
            "abuse: the attacked session holds {queued} queued messages (limit 32)"
        ));
    }
    let mut fired = 0u64;
    let mut after = 0i64;
    loop {
        let page: Value = match shared
            .http
            .get(format!(
                "{base}/v1/sessions/{}/events?after={after}&limit=1000",
                target.id
            ))
            .send()
            .await
        {
            Ok(answer) => answer.json().await.unwrap_or_default(),
            Err(_) => break,
        };
        let events = page["events"].as_array().cloned().unwrap_or_default();
        let Some(last) = events.last().and_then(|e| e["seq"].as_i64()) else {
            break;
        };
        fired += events
            .iter()
            .filter(|e| e["kind"] == "schedule_fired")
            .count() as u64;
        after = last;
    }
    let hours = target.started.elapsed().as_secs() / 3600 + 1;
    let allowed = 60 * hours;
    if fired > allowed {
        found.push(format!(
            "abuse: the attacked session's schedules fired {fired} times in {} s (at most \
             {allowed})",
            target.started.elapsed().as_secs()
        ));
    }
    found
}

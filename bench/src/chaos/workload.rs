//! The chaos workload: clients that drive sessions of the `chaos` agent over REST and
//! WebSocket — messages that stream answers or call idempotent and non-idempotent webhooks,
//! approvals decided over either, cancels, forks and closes — and write down every
//! acknowledgement the server gave (the seq it answered with, or the event frame that showed
//! it) and every event a WebSocket delivered, for the checks after each restart.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::Context;
use futures_util::{SinkExt, StreamExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

/// An input the server acknowledged, and where it said it journaled it.
#[derive(Debug, Clone)]
pub enum Ack {
    /// A user message (`seq` from the 202, or the event frame over WebSocket).
    Message {
        client_id: String,
        seq: i64,
    },
    Approval {
        call_id: String,
        seq: i64,
    },
    Cancel {
        seq: i64,
    },
}

/// What the clients know of one session.
#[derive(Debug, Default)]
pub struct Tracked {
    /// Events a client was sent (WebSocket frames) or the checks read back, by seq: committed,
    /// so each must stay exactly as it was.
    pub observed: BTreeMap<i64, Value>,
    pub acks: Vec<Ack>,
    /// A close was acknowledged.
    pub closed: bool,
    /// (source, at) when the session is a fork.
    pub fork_of: Option<(Uuid, i64)>,
    /// Two clients were sent different events under one seq.
    pub conflicts: Vec<String>,
    /// The journal's length at the last check (what the tallies have counted).
    pub verified: usize,
}

/// Acknowledgements by kind, for the tallies.
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
pub struct Counts {
    pub sessions: u64,
    pub messages_rest: u64,
    pub messages_ws: u64,
    pub approvals_rest: u64,
    pub approvals_ws: u64,
    pub cancels: u64,
    pub forks: u64,
    pub closes: u64,
    /// Steps that failed — a request with no answer (the server was killed under it) or an
    /// unexpected status: nothing of them is counted as acknowledged.
    pub unanswered: u64,
}

impl Counts {
    pub fn add(&mut self, c: Counts) {
        self.sessions += c.sessions;
        self.messages_rest += c.messages_rest;
        self.messages_ws += c.messages_ws;
        self.approvals_rest += c.approvals_rest;
        self.approvals_ws += c.approvals_ws;
        self.cancels += c.cancels;
        self.forks += c.forks;
        self.closes += c.closes;
        self.unanswered += c.unanswered;
    }
}

#[derive(Default)]
pub struct Ledger {
    pub sessions: HashMap<Uuid, Tracked>,
    /// Answers of 500 and above, by `status code` (`code` from the JSON error body, or
    /// `no-json-error` when it had none).
    pub server_errors: BTreeMap<String, u64>,
    /// The first answers of 500 and above other than 503: the request and the message, so a
    /// run that fails names what failed (the server's log goes with its data directory).
    pub unexpected_errors: Vec<String>,
    /// Sessions touched since the last check.
    pub dirty: HashSet<Uuid>,
    pub counts: Counts,
}

/// What the clients and the checks share.
pub struct Shared {
    /// Each node's `http://127.0.0.1:PORT` (the same ports across restarts).
    bases: Vec<String>,
    pub http: reqwest::Client,
    /// Clients hold it shared while they act; the checks take it exclusively.
    pub gate: tokio::sync::RwLock<()>,
    pub ledger: Mutex<Ledger>,
    pub stop: AtomicBool,
    /// The `Authorization` the clients send (WebSockets too), on a keyed server.
    authorization: Option<tokio_tungstenite::tungstenite::http::HeaderValue>,
    /// Latency of the clients' REST requests (microseconds) since the last `take_latency`.
    latency: Mutex<hdrhistogram::Histogram<u64>>,
}

impl Shared {
    /// Clients of the nodes at `bases`, sending `key` (an operator API key) when given.
    pub fn new(bases: Vec<String>, key: Option<&str>) -> Self {
        let mut headers = reqwest::header::HeaderMap::new();
        let authorization = key.and_then(|k| format!("Bearer {k}").parse().ok());
        if let Some(value) = authorization.clone() {
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        Shared {
            bases,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(15))
                .pool_max_idle_per_host(0)
                .default_headers(headers)
                .build()
                .expect("an HTTP client"),
            authorization,
            gate: tokio::sync::RwLock::new(()),
            ledger: Mutex::new(Ledger::default()),
            stop: AtomicBool::new(false),
            latency: Mutex::new(latency_histogram()),
        }
    }

    /// The node a request goes to: one picked at random (a cluster serves any session on
    /// any node).
    pub fn base(&self) -> &str {
        &self.bases[rand::random_range(0..self.bases.len())]
    }

    /// The latency recorded since the last call, and a fresh start.
    pub fn take_latency(&self) -> hdrhistogram::Histogram<u64> {
        let mut latency = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *latency, latency_histogram())
    }

    pub fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `method path` with an optional JSON body: (status, body). Errors are requests the
    /// server did not answer.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base()));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let started = std::time::Instant::now();
        let response = request.send().await?;
        let status = response.status().as_u16();
        let body = response.json::<Value>().await.unwrap_or(Value::Null);
        let micros = started.elapsed().as_micros() as u64;
        let _ = self
            .latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(micros.clamp(1, 60_000_000));
        if status >= 500 {
            let code = body["error"]["code"].as_str().unwrap_or("no-json-error");
            let mut ledger = self.ledger();
            *ledger
                .server_errors
                .entry(format!("{status} {code}"))
                .or_default() += 1;
            if status != 503 && ledger.unexpected_errors.len() < 5 {
                let message = body["error"]["message"].as_str().unwrap_or_default();
                ledger
                    .unexpected_errors
                    .push(format!("{method} {path} → {status} {code}: {message}"));
            }
        }
        Ok((status, body))
    }

    fn touch(&self, id: Uuid, update: impl FnOnce(&mut Tracked, &mut Counts)) {
        let mut ledger = self.ledger();
        let ledger = &mut *ledger;
        ledger.dirty.insert(id);
        update(ledger.sessions.entry(id).or_default(), &mut ledger.counts);
    }
}

/// 1 µs to 60 s, three significant figures.
fn latency_histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// One client: acts on its session until told to stop.
pub async fn client(shared: std::sync::Arc<Shared>, number: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut client = Client {
        number,
        session: None,
        n: 0,
    };
    while !shared.stop.load(Ordering::Relaxed) {
        let result = {
            let _acting = shared.gate.read().await;
            client.step(&shared, &mut rng).await
        };
        let pause = if result.is_err() {
            shared.ledger().counts.unanswered += 1;
            100
        } else {
            rng.random_range(10..80)
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

struct Client {
    number: usize,
    session: Option<Uuid>,
    n: u64,
}

/// What a message asks the model double for (see `doubles::chat`), with its weight.
const DIRECTIVES: [(&str, u32); 6] = [
    ("notify", 15),
    ("pay", 15),
    ("delete", 12),
    ("transfer", 12),
    ("long", 16),
    ("hello", 30),
];

impl Client {
    async fn step(&mut self, shared: &Shared, rng: &mut StdRng) -> anyhow::Result<()> {
        let id = match self.session {
            Some(id) => id,
            None => {
                let (status, body) = shared
                    .call(
                        reqwest::Method::POST,
                        "/v1/sessions",
                        Some(json!({ "agent": "chaos" })),
                    )
                    .await?;
                anyhow::ensure!(status == 201, "create: {status} {body}");
                let id: Uuid = body["id"].as_str().context("id")?.parse()?;
                shared.touch(id, |_, counts| counts.sessions += 1);
                self.session = Some(id);
                id
            }
        };
        let (status, row) = shared
            .call(reqwest::Method::GET, &format!("/v1/sessions/{id}"), None)
            .await?;
        anyhow::ensure!(status == 200, "get: {status} {row}");
        let last_seq = row["last_seq"].as_i64().unwrap_or(0);
        match row["status"].as_str().unwrap_or_default() {
            "closed" | "failed" => self.session = None,
            "awaiting_approval" => {
                let call_id = row["pending_approvals"][0]["call_id"]
                    .as_str()
                    .context("a pending approval")?
                    .to_string();
                let approved = rng.random_bool(0.8);
                if rng.random_bool(0.5) {
                    self.approve_rest(shared, id, call_id, approved).await?;
                } else {
                    self.approve_ws(shared, id, last_seq, call_id, approved)
                        .await?;
                }
            }
            "running" => match rng.random_range(0..10) {
                0 => self.cancel(shared, id).await?,
                1 => self.message(shared, rng, id, last_seq).await?,
                _ => {}
            },
            _ => match rng.random_range(0..25) {
                0 if last_seq > 0 => {
                    let at = rng.random_range(1..=last_seq);
                    self.fork(shared, id, at, rng.random_bool(0.5)).await?;
                }
                1 => self.close(shared, id).await?,
                _ => self.message(shared, rng, id, last_seq).await?,
            },
        }
        Ok(())
    }

    async fn message(
        &mut self,
        shared: &Shared,
        rng: &mut StdRng,
        id: Uuid,
        last_seq: i64,
    ) -> anyhow::Result<()> {
        self.n += 1;
        let total: u32 = DIRECTIVES.iter().map(|(_, w)| w).sum();
        let mut pick = rng.random_range(0..total);
        let directive = DIRECTIVES
            .iter()
            .find(|(_, w)| {
                let hit = pick < *w;
                pick = pick.saturating_sub(*w);
                hit
            })
            .map_or("hello", |(d, _)| *d);
        let client_id = format!("c{}-{}", self.number, self.n);
        let text = format!("{directive} {client_id}");
        if rng.random_bool(0.5) {
            let (status, body) = shared
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/sessions/{id}/messages"),
                    Some(json!({ "text": text, "client_id": client_id })),
                )
                .await?;
            if status == 202 {
                let seq = body["seq"].as_i64().context("seq")?;
                shared.touch(id, |t, c| {
                    t.acks.push(Ack::Message { client_id, seq });
                    c.messages_rest += 1;
                });
            }
        } else {
            let frame = json!({ "type": "user_message", "text": text, "client_id": client_id });
            let acked = over_ws(shared, id, last_seq, frame, |event| {
                event["kind"] == "user_message" && event["payload"]["client_id"] == client_id
            })
            .await?;
            if let Some(seq) = acked {
                shared.touch(id, |t, c| {
                    t.acks.push(Ack::Message { client_id, seq });
                    c.messages_ws += 1;
                });
            }
        }
        Ok(())
    }

    async fn approve_rest(
        &self,
        shared: &Shared,
        id: Uuid,
        call_id: String,
        approved: bool,
    ) -> anyhow::Result<()> {
        let (status, body) = shared
            .call(
                reqwest::Method::POST,
                &format!("/v1/sessions/{id}/approvals/{call_id}"),
                Some(json!({ "approved": approved })),
            )
            .await?;
        if status == 200 {
            let seq = body["seq"].as_i64().context("seq")?;
            shared.touch(id, |t, c| {
                t.acks.push(Ack::Approval { call_id, seq });
                c.approvals_rest += 1;
            });
        }
        Ok(())
    }

    async fn approve_ws(
        &self,
        shared: &Shared,
        id: Uuid,
        last_seq: i64,
        call_id: String,
        approved: bool,
    ) -> anyhow::Result<()> {
        let frame = json!({ "type": "approval", "call_id": call_id, "approved": approved });
        let acked = over_ws(shared, id, last_seq, frame, |event| {
            event["kind"] == "approval_decided" && event["payload"]["call_id"] == call_id
        })
        .await?;
        if let Some(seq) = acked {
            shared.touch(id, |t, c| {
                t.acks.push(Ack::Approval { call_id, seq });
                c.approvals_ws += 1;
            });
        }
        Ok(())
    }

    async fn cancel(&self, shared: &Shared, id: Uuid) -> anyhow::Result<()> {
        let (status, body) = shared
            .call(
                reqwest::Method::POST,
                &format!("/v1/sessions/{id}/cancel"),
                None,
            )
            .await?;
        if status == 200 {
            let seq = body["seq"].as_i64().context("seq")?;
            shared.touch(id, |t, c| {
                t.acks.push(Ack::Cancel { seq });
                c.cancels += 1;
            });
        }
        Ok(())
    }

    async fn fork(
        &mut self,
        shared: &Shared,
        id: Uuid,
        at: i64,
        follow: bool,
    ) -> anyhow::Result<()> {
        let (status, body) = shared
            .call(
                reqwest::Method::POST,
                &format!("/v1/sessions/{id}/fork"),
                Some(json!({ "at": at })),
            )
            .await?;
        if status == 201 {
            let child: Uuid = body["id"].as_str().context("id")?.parse()?;
            shared.touch(child, |t, c| {
                t.fork_of = Some((id, at));
                c.forks += 1;
            });
            if follow {
                self.session = Some(child);
            }
        }
        Ok(())
    }

    async fn close(&mut self, shared: &Shared, id: Uuid) -> anyhow::Result<()> {
        let (status, _) = shared
            .call(reqwest::Method::DELETE, &format!("/v1/sessions/{id}"), None)
            .await?;
        if status == 200 {
            shared.touch(id, |t, c| {
                t.closed = true;
                c.closes += 1;
            });
            self.session = None;
        }
        Ok(())
    }
}

/// Opens the session's WebSocket after `after_seq`, sends `frame`, and reads until an event
/// `acks` it (its seq), an `error` frame refuses it (`None`), or two seconds pass (`None`:
/// unacknowledged). Every event frame read is recorded as observed. Errors: the connection
/// failed or died.
async fn over_ws(
    shared: &Shared,
    id: Uuid,
    after_seq: i64,
    frame: Value,
    acks: impl Fn(&Value) -> bool,
) -> anyhow::Result<Option<i64>> {
    let url = format!(
        "{}/v1/sessions/{id}/ws?after_seq={after_seq}",
        shared.base().replacen("http://", "ws://", 1)
    );
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)?;
    if let Some(value) = &shared.authorization {
        request.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::header::AUTHORIZATION,
            value.clone(),
        );
    }
    let (mut socket, _) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(request),
    )
    .await
    .context("connect timed out")??;
    socket.send(Message::text(frame.to_string())).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut acked = None;
    let mut events = Vec::new();
    loop {
        let next = tokio::time::timeout_at(deadline, socket.next()).await;
        let Ok(Some(message)) = next else { break };
        let Message::Text(text) = message? else {
            continue;
        };
        let value: Value = serde_json::from_str(&text)?;
        match value["type"].as_str() {
            Some("event") => {
                let mut event = value.clone();
                if let Some(object) = event.as_object_mut() {
                    object.remove("type");
                }
                let hit = acks(&event);
                let seq = event["seq"].as_i64().context("an event's seq")?;
                events.push((seq, event));
                if hit {
                    acked = Some(seq);
                    break;
                }
            }
            Some("error") => break,
            _ => {}
        }
    }
    let _ = socket.close(None).await;
    shared.touch(id, |t, _| {
        for (seq, event) in events {
            match t.observed.get(&seq) {
                Some(seen) if *seen != event => t
                    .conflicts
                    .push(format!("seq {seq} was sent as {seen} and later as {event}")),
                Some(_) => {}
                None => {
                    t.observed.insert(seq, event);
                }
            }
        }
    });
    Ok(acked)
}

//! `stead bench ws`: many WebSocket clients on one `stead serve` process — the server's memory
//! with all of them attached, broadcast latency (an event's commit time, which the server
//! stamps into the event's `at`, to its arrival at each client), and the time from a
//! reconnect to the first replayed event after a `resume`.
//!
//! The server is this binary run as `stead serve` in a scratch data directory (SQLite); its
//! model is a tiny OpenAI-compatible upstream inside the bench process that streams a short
//! answer at once, so the figures are the front door's and the actors', not a model's. Clients
//! and server share the machine: on a small machine the clients' own scheduling is part of the
//! latency.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::response::IntoResponse;
use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::cli::WsBenchArgs;
use crate::ServeProcess;
use stead_config::prepare_data_dir;
use stead_config::Config;

/// The bench's model: an OpenAI-compatible stream of a few words, at once.
async fn upstream() -> anyhow::Result<String> {
    async fn chat() -> impl IntoResponse {
        let mut body = String::new();
        for word in ["The ", "answer ", "is ", "forty-two."] {
            let chunk = json!({ "model": "bench", "choices": [{ "index": 0, "delta": { "content": word } }] });
            body.push_str(&format!("data: {chunk}\n\n"));
        }
        let last = json!({ "model": "bench", "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }],
                           "usage": { "prompt_tokens": 10, "completion_tokens": 4 } });
        body.push_str(&format!("data: {last}\n\ndata: [DONE]\n\n"));
        (
            [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
            body,
        )
    }
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(chat));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// The server, with socket bounds that admit every client of the run (the defaults allow 16
/// sockets per session).
fn start_server(
    dir: &std::path::Path,
    upstream: &str,
    args: &WsBenchArgs,
) -> anyhow::Result<ServeProcess> {
    let per_session = args.clients.div_ceil(args.sessions.max(1)) + 1;
    let connections = args.clients + 1_000;
    ServeProcess::start(
        dir,
        &format!(
            "[server]\nmax_connections = {connections}\nmax_websockets_per_session = {per_session}\n\n\
             [[providers]]\nname = \"bench\"\nkind = \"openai\"\nbase_url = \"{upstream}\"\n\n\
             [[routes]]\nname = \"default\"\ntargets = [{{ provider = \"bench\", model = \"bench\" }}]\n\n\
             [[agents]]\nname = \"bench\"\nroute = \"default\"\n"
        ),
    )
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn next_json(socket: &mut Socket) -> Option<Value> {
    while let Some(message) = socket.next().await {
        match message.ok()? {
            Message::Text(text) => return serde_json::from_str(&text).ok(),
            Message::Close(_) => return None,
            _ => {}
        }
    }
    None
}

fn micros_since(at: &str) -> Option<u64> {
    let at = chrono::DateTime::parse_from_rfc3339(at).ok()?;
    let now = chrono::Utc::now();
    Some(
        (now - at.with_timezone(&chrono::Utc))
            .num_microseconds()?
            .max(0) as u64,
    )
}

/// The target for an idle client's server memory (docs/benchmarks.md).
const PER_CLIENT_KIB: f64 = 10.0;

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

pub async fn ws(config: Config, args: WsBenchArgs) -> anyhow::Result<()> {
    prepare_data_dir(&config.server.data_dir)?;
    let fds = stead_http::raise_fd_limit();
    anyhow::ensure!(
        fds as usize > args.clients + 100,
        "the open-file limit is {fds}; {} clients need more (ulimit -n)",
        args.clients
    );
    let dir = config
        .server
        .data_dir
        .join(format!("bench-ws-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    let result = run(&dir, &args).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run(dir: &std::path::Path, args: &WsBenchArgs) -> anyhow::Result<()> {
    let upstream = upstream().await?;
    let server = start_server(dir, &upstream, args)?;
    let http = reqwest::Client::new();
    let (idle_before, _) = server.memory();
    let sessions = args.sessions.max(1);
    let mut ids = Vec::new();
    for _ in 0..sessions {
        let created: Value = http
            .post(format!("{}/v1/sessions", server.base))
            .json(&json!({ "agent": "bench" }))
            .send()
            .await?
            .json()
            .await?;
        ids.push(created["id"].as_str().context("session id")?.to_string());
    }
    let ws_base = server.base.replace("http://", "ws://");

    // 1. Attach every client (a bounded number of handshakes in flight).
    eprintln!(
        "connecting {} clients to {sessions} sessions…",
        args.clients
    );
    let finished = Arc::new(AtomicUsize::new(0));
    // 0: every session at once (a burst); 1: one session at a time.
    let phase = Arc::new(AtomicUsize::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let gate = Arc::new(tokio::sync::Semaphore::new(64));
    let started = Instant::now();
    let mut clients = Vec::with_capacity(args.clients);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<anyhow::Result<()>>(args.clients);
    for i in 0..args.clients {
        let url = format!("{ws_base}/v1/sessions/{}/ws", ids[i % sessions]);
        let (gate, finished, ready, stop, phase) = (
            gate.clone(),
            finished.clone(),
            ready_tx.clone(),
            stop_rx.clone(),
            phase.clone(),
        );
        clients.push(tokio::spawn(client(
            url, gate, finished, ready, stop, phase,
        )));
    }
    drop(ready_tx);
    wait_attached(&mut ready_rx, args.clients).await?;
    let connect_secs = started.elapsed().as_secs_f64();
    let (rss_attached, _) = server.memory();

    // 2. Broadcast: every session takes `turns` messages; every client sees every event.
    eprintln!("broadcasting {} turns on each session…", args.turns);
    let broadcast_started = Instant::now();
    for turn in 0..args.turns {
        let mut posts = Vec::new();
        for id in &ids {
            let request = http
                .post(format!("{}/v1/sessions/{id}/messages", server.base))
                .json(&json!({ "text": format!("question {turn}") }));
            posts.push(tokio::spawn(request.send()));
        }
        for post in posts {
            post.await??.error_for_status()?;
        }
        let want = args.clients * (turn + 1);
        let deadline = Instant::now() + Duration::from_secs(300);
        while finished.load(Ordering::Relaxed) < want {
            anyhow::ensure!(
                Instant::now() < deadline,
                "turn {turn} did not reach every client"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let broadcast_secs = broadcast_started.elapsed().as_secs_f64();
    let (rss_after_broadcast, peak) = server.memory();

    // 2b. One session at a time: the fan-out latency without a burst behind it.
    phase.store(1, Ordering::Relaxed);
    let per_session = args.clients / sessions;
    let quiet_sessions = sessions.min(20);
    quiet_turns(
        &http,
        &server.base,
        &ids[..quiet_sessions],
        &finished,
        per_session,
    )
    .await?;

    // 3. Reconnects while everyone else stays attached: connect, hello, resume, first event.
    eprintln!("timing {} reconnects…", args.reconnects);
    let reconnect = time_reconnects(&ws_base, &ids, args.reconnects).await?;

    let _ = stop_tx.send(true);
    let mut broadcast = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut quiet = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for client in clients {
        let [burst, one] = client.await?;
        broadcast.add(burst)?;
        quiet.add(one)?;
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let per_client =
        |rss: u64| rss.saturating_sub(idle_before) as f64 / 1024.0 / args.clients.max(1) as f64;
    let (kib_attached, kib_after) = (per_client(rss_attached), per_client(rss_after_broadcast));
    let result = json!({
        "clients": args.clients,
        "sessions": sessions,
        "turns": args.turns,
        "connect_seconds": connect_secs,
        "per_client_kib": { "attached": kib_attached, "after_broadcast": kib_after, "target": PER_CLIENT_KIB },
        "server_rss_mib": { "idle": mib(idle_before), "attached": mib(rss_attached),
                            "after_broadcast": mib(rss_after_broadcast), "peak": mib(peak) },
        "broadcast": { "events": broadcast.len(), "seconds": broadcast_secs,
                       "p50_ms": ms(&broadcast, 0.5), "p99_ms": ms(&broadcast, 0.99),
                       "max_ms": broadcast.max() as f64 / 1000.0 },
        "broadcast_one_session_at_a_time": { "events": quiet.len(), "sessions": quiet_sessions,
                       "p50_ms": ms(&quiet, 0.5), "p99_ms": ms(&quiet, 0.99) },
        "reconnect_to_first_replayed_event": { "n": reconnect.len(),
                       "p50_ms": ms(&reconnect, 0.5), "p99_ms": ms(&reconnect, 0.99) },
    });
    if args.json {
        println!("{result}");
    } else {
        println!(
            "{} clients on {sessions} sessions: attached in {connect_secs:.1} s; server RSS {:.0} MiB attached, {:.0} MiB after broadcast (peak {:.0} MiB; {:.0} MiB before); target ≤ 2 GiB",
            args.clients, mib(rss_attached), mib(rss_after_broadcast), mib(peak), mib(idle_before)
        );
        println!(
            "per client: {kib_attached:.1} KiB attached, {kib_after:.1} KiB after the broadcast; target ≤ {PER_CLIENT_KIB} KiB ({:.2}× the target)",
            kib_after / PER_CLIENT_KIB
        );
        println!(
            "broadcast, all {sessions} sessions at once: {} event deliveries in {broadcast_secs:.1} s, latency p50 {:.2} ms, p99 {:.2} ms",
            broadcast.len(), ms(&broadcast, 0.5), ms(&broadcast, 0.99)
        );
        println!(
            "broadcast, one session ({per_session} clients) at a time: latency p50 {:.2} ms, p99 {:.2} ms over {} deliveries",
            ms(&quiet, 0.5),
            ms(&quiet, 0.99),
            quiet.len()
        );
        println!(
            "reconnect → first replayed event: p50 {:.2} ms, p99 {:.2} ms over {} reconnects (target p99 ≤ 10 ms)",
            ms(&reconnect, 0.5), ms(&reconnect, 0.99), reconnect.len()
        );
    }
    Ok(())
}

/// One attached client: waits for its hello, then records each event's delivery latency
/// (by phase: the burst, then one session at a time) until told to stop.
async fn client(
    url: String,
    gate: Arc<tokio::sync::Semaphore>,
    finished: Arc<AtomicUsize>,
    ready: tokio::sync::mpsc::Sender<anyhow::Result<()>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    phase: Arc<AtomicUsize>,
) -> [Histogram<u64>; 2] {
    let histogram = || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    let mut latency = [histogram(), histogram()];
    let permit = gate.acquire_owned().await.expect("gate");
    let socket = tokio_tungstenite::connect_async(&url).await;
    drop(permit);
    let mut socket = match socket {
        Ok((socket, _)) => socket,
        Err(error) => {
            let _ = ready.send(Err(error.into())).await;
            return latency;
        }
    };
    let hello = next_json(&mut socket).await;
    let _ = ready
        .send(if hello.is_some_and(|h| h["type"] == "hello") {
            Ok(())
        } else {
            Err(anyhow::anyhow!("no hello"))
        })
        .await;
    loop {
        tokio::select! {
            frame = next_json(&mut socket) => {
                let Some(frame) = frame else { break };
                if frame["type"] == "event" {
                    if let Some(us) = frame["at"].as_str().and_then(micros_since) {
                        let _ = latency[phase.load(Ordering::Relaxed).min(1)].record(us.max(1));
                    }
                    if frame["kind"] == "turn_finished" {
                        finished.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            _ = stop.changed() => break,
        }
    }
    let _ = socket.close(None).await;
    latency
}

/// Reconnects while everyone else stays attached: connect, hello, resume, first replayed
/// event, timed.
async fn time_reconnects(
    ws_base: &str,
    ids: &[String],
    reconnects: usize,
) -> anyhow::Result<Histogram<u64>> {
    let mut reconnect = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for i in 0..reconnects {
        let url = format!("{ws_base}/v1/sessions/{}/ws", ids[i % ids.len()]);
        let t0 = Instant::now();
        let (mut socket, _) = tokio_tungstenite::connect_async(&url).await?;
        let hello = next_json(&mut socket).await.context("hello")?;
        let last = hello["last_seq"].as_i64().unwrap_or(1);
        socket
            .send(Message::Text(
                json!({ "type": "resume", "after_seq": (last - 3).max(0) })
                    .to_string()
                    .into(),
            ))
            .await?;
        loop {
            let frame = next_json(&mut socket).await.context("replayed event")?;
            if frame["type"] == "event" {
                break;
            }
        }
        reconnect.record((t0.elapsed().as_micros() as u64).max(1))?;
        let _ = socket.close(None).await;
    }
    Ok(reconnect)
}

/// One message to each of `ids` in turn, each waiting until its `per_session` clients saw the
/// turn end: the fan-out latency without a burst behind it.
async fn quiet_turns(
    http: &reqwest::Client,
    base: &str,
    ids: &[String],
    finished: &AtomicUsize,
    per_session: usize,
) -> anyhow::Result<()> {
    for id in ids {
        let before = finished.load(Ordering::Relaxed);
        http.post(format!("{}/v1/sessions/{id}/messages", base))
            .json(&json!({ "text": "one more" }))
            .send()
            .await?
            .error_for_status()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while finished.load(Ordering::Relaxed) < before + per_session {
            anyhow::ensure!(
                Instant::now() < deadline,
                "a quiet turn did not reach its clients"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    Ok(())
}

/// Waits until every one of `clients` said it attached (its hello came), showing progress.
async fn wait_attached(
    ready: &mut tokio::sync::mpsc::Receiver<anyhow::Result<()>>,
    clients: usize,
) -> anyhow::Result<()> {
    let mut connected = 0;
    while let Some(result) = ready.recv().await {
        result.context("a client could not attach")?;
        connected += 1;
        if connected % 2000 == 0 {
            eprintln!("  {connected} attached");
        }
        if connected == clients {
            break;
        }
    }
    Ok(())
}

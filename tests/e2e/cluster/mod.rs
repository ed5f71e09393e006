//! Three `stead serve` nodes on loopback sharing one PostgreSQL (docs/cluster.md), a client
//! picking a node per request: chat over REST through any node, a WebSocket on one node while
//! the approval is decided through another, resume on a third, the same approvals inbox and
//! cluster view on every node, a forged node signature refused; then the owner of a session that is mid-turn is killed with
//! SIGKILL and a live node's sweep takes the turn over within the lease TTL plus the sweep.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::db;
use stead_testkit::stead::{free_port, Stead};
use stead_testkit::upstream::{Reply, Upstream};

mod chaos;

const SECRET_ENV: &str = "TEST_STEAD_CLUSTER_SECRET";
const SECRET: &str = "a shared cluster secret of more than 32 bytes";
/// Lease TTL and sweep period of the test cluster (seconds).
const LEASE_TTL: u64 = 3;
const SWEEP: u64 = 1;

/// The ops agent's model: "time" asks for the clock (approval needed), "slow" answers after
/// two seconds, anything else answers at once.
fn reply(request: &Value) -> Reply {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    if last["role"] == "tool" {
        return Reply::text("It is noon.");
    }
    let text = last["content"].as_str().unwrap_or_default();
    if text.contains("time") {
        Reply::tool("clock", json!({}))
    } else if text.contains("slow") {
        Reply::slow_text("Slowly answered.", Duration::from_secs(2))
    } else {
        Reply::text("Hello from the cluster.")
    }
}

struct Cluster {
    nodes: Vec<Option<Stead>>,
    /// Each node's configuration and port, to start it again.
    configs: Vec<(String, u16)>,
    url: String,
    _db: stead_persistence::scratch::ScratchDatabase,
    _up: Upstream,
}

impl Cluster {
    async fn start(size: usize) -> Cluster {
        Self::start_with(size, LEASE_TTL).await
    }

    async fn start_with(size: usize, lease_ttl: u64) -> Cluster {
        let scratch = db::scratch_postgres("stead_cluster").await;
        let up = Upstream::respond(reply).await;
        let key: Vec<u8> = (0..32u8).collect();
        let mut nodes = Vec::new();
        let mut configs = Vec::new();
        for i in 0..size {
            let port = free_port();
            let config = up.config(
                "default",
                r#"model = "double""#,
                &format!(
                    r#"[server]
node_id = "node-{i}"

[sessions]
lease_ttl_secs = {lease_ttl}

[cluster]
advertise_url = "http://127.0.0.1:{port}"
secret_env = "{SECRET_ENV}"
heartbeat_secs = 1
node_ttl_secs = 3
sweep_secs = {SWEEP}

[[agents]]
name = "ops"
route = "default"

[[agents.tools]]
name = "clock"
kind = "clock"
approval = "always"
"#
                ),
            );
            let data = tempfile::tempdir().unwrap();
            // Every node signs and checks session tokens with the same key.
            let key_path = data.path().join("session.key");
            std::fs::write(&key_path, &key).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
            nodes.push(Some(Stead::start_listening(
                data,
                &config,
                Some(scratch.url()),
                &[(SECRET_ENV, SECRET)],
                &format!("127.0.0.1:{port}"),
            )));
            configs.push((config, port));
        }
        Cluster {
            nodes,
            configs,
            url: scratch.url().to_string(),
            _db: scratch,
            _up: up,
        }
    }

    fn node(&self, i: usize) -> &Stead {
        self.nodes[i % self.nodes.len()]
            .as_ref()
            .expect("a live node")
    }

    /// SIGTERM to node `i` (it drains), then the node again on its data directory and port.
    fn restart(&mut self, i: usize) {
        let mut node = self.nodes[i].take().expect("a live node");
        let status = node.signal(libc::SIGTERM);
        assert!(status.success(), "node {i} drained and exited 0: {status}");
        let data = std::mem::replace(&mut node.data, tempfile::tempdir().unwrap());
        drop(node);
        let (config, port) = &self.configs[i];
        self.nodes[i] = Some(Stead::start_listening(
            data,
            config,
            Some(&self.url),
            &[(SECRET_ENV, SECRET)],
            &format!("127.0.0.1:{port}"),
        ));
    }
}

/// Polls `GET /v1/sessions/{id}` through `node` until its status is `status`.
async fn wait_status(node: &Stead, id: &str, status: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (_, session) = node.call("GET", &format!("/v1/sessions/{id}"), None).await;
        if session["status"] == status {
            return session;
        }
        assert!(
            Instant::now() < deadline,
            "{id} never became {status}: {session}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_serve_any_session_and_take_over_a_dead_nodes_turns() {
    let cluster = Cluster::start(3).await;

    // Every node sees the three, alive.
    for i in 0..3 {
        let (status, view) = cluster.node(i).call("GET", "/v1/cluster", None).await;
        assert_eq!(status, 200, "{view}");
        assert_eq!(view["clustered"], true);
        assert_eq!(view["node_id"], format!("node-{i}"));
        let nodes = view["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 3, "{view}");
        assert!(nodes.iter().all(|n| n["alive"] == true), "{view}");
    }

    eprintln!("cluster: three nodes up");
    // A session created through node 0 chats through every node: each answer comes back
    // whichever node holds the session.
    let (id, token) = cluster.node(0).create("ops").await;
    for turn in 0..6 {
        let node = cluster.node(turn);
        let (status, body) = node.say(&id, &format!("hello {turn}")).await;
        assert_eq!(status, 200, "node {turn}: {body}");
        assert_eq!(
            body["reply"], "Hello from the cluster.",
            "node {turn}: {body}"
        );
        eprintln!("cluster: turn {turn} through node {}", turn % 3);
    }
    let journal = cluster.node(2).journal(&id).await;
    let users = journal
        .iter()
        .filter(|e| e["kind"] == "user_message")
        .count();
    assert_eq!(users, 6);

    // A WebSocket on node 1; the message through node 2; the approval through node 0.
    let mut ws = cluster.node(1).ws(&id, &token, "").await;
    // The owner attached the proxied socket: its `hello` came through node 1.
    let hello = ws.next().await.expect("hello");
    assert_eq!(hello["type"], "hello", "{hello}");
    let (status, _) = cluster
        .node(2)
        .call(
            "POST",
            &format!("/v1/sessions/{id}/messages"),
            Some(json!({"text": "what time is it?"})),
        )
        .await;
    assert_eq!(status, 202);
    eprintln!("cluster: message sent through node 2");
    let frames = ws.until_event("approval_requested").await;
    eprintln!("cluster: the WebSocket on node 1 saw the approval request");
    let asked = stead_testkit::client::events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "approval_requested")
        .unwrap();
    let call = asked["payload"]["call_id"].as_str().unwrap().to_string();
    // The inbox is the same on every node.
    let (_, inbox) = cluster.node(0).call("GET", "/v1/approvals", None).await;
    assert_eq!(inbox["approvals"].as_array().unwrap().len(), 1, "{inbox}");
    for i in 1..3 {
        let (_, other) = cluster.node(i).call("GET", "/v1/approvals", None).await;
        assert_eq!(other, inbox, "node {i}");
    }
    let (status, decided) = cluster
        .node(0)
        .call_as(
            "POST",
            &format!("/v1/sessions/{id}/approvals/{call}"),
            Some(json!({"approved": true})),
            Some(&token),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    let frames = ws.until_event("turn_finished").await;
    let answer = stead_testkit::client::events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap();
    assert_eq!(answer["payload"]["text"], "It is noon.");
    let seen = answer["seq"].as_i64().unwrap();
    drop(ws);

    // Resume on node 2 after an earlier seq: the events after it, in order, once.
    let from = seen - 3;
    let mut resumed = cluster
        .node(2)
        .ws(&id, &token, &format!("&after_seq={from}"))
        .await;
    let mut seqs = Vec::new();
    while seqs.last() != Some(&(seen + 1)) {
        let frame = resumed.next().await.expect("resumed frames");
        if frame["type"] == "event" {
            seqs.push(frame["seq"].as_i64().unwrap());
        }
    }
    assert_eq!(seqs, ((from + 1)..=(seen + 1)).collect::<Vec<_>>());
    drop(resumed);
    let mut forwarded = 0;
    for i in 0..3 {
        let text = cluster.node(i).metrics().await;
        forwarded += text
            .lines()
            .filter(|l| l.starts_with("stead_cluster_forwarded_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>();
    }
    assert!(forwarded > 0, "requests reached nodes other than the owner");

    // A request that claims to come from a node without the secret's signature is refused.
    let forged = reqwest::Client::new()
        .get(format!("{}/v1/sessions/{id}", cluster.node(1).base))
        .header("x-stead-node", "node-0")
        .header(
            "x-stead-node-time",
            chrono::Utc::now().timestamp().to_string(),
        )
        .header("x-stead-node-signature", "00".repeat(32))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    let body: Value = forged.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_credentials");

    // Failover: the owner dies mid-turn; a live node takes the turn over.
    let (status, _) = cluster
        .node(1)
        .call(
            "POST",
            &format!("/v1/sessions/{id}/messages"),
            Some(json!({"text": "a slow one"})),
        )
        .await;
    assert_eq!(status, 202);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let owner = owner_of(&cluster, &id).await;
    let killed_at = Instant::now();
    let mut cluster = cluster;
    cluster.nodes[owner].take().unwrap().kill();
    let survivor = cluster.node(owner + 1);
    let session = wait_status(survivor, &id, "idle", Duration::from_secs(30)).await;
    let takeover = killed_at.elapsed();
    let journal = survivor.journal(&id).await;
    let last = journal
        .iter()
        .rev()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap();
    assert_eq!(last["payload"]["text"], "Slowly answered.", "{session}");
    eprintln!("takeover of a running session after SIGKILL of its node: {takeover:?}");
    // The lease's TTL, a sweep, and the re-issued two-second model call, with slack.
    assert!(
        takeover < Duration::from_secs(LEASE_TTL + SWEEP + 2 + 5),
        "took {takeover:?}"
    );
}

/// The node whose live lease holds the session (by its `sessions` count: the only session).
async fn owner_of(cluster: &Cluster, _id: &str) -> usize {
    let (_, view) = cluster.node(0).call("GET", "/v1/cluster", None).await;
    let nodes = view["nodes"].as_array().unwrap();
    let owner = nodes
        .iter()
        .find(|n| n["sessions"].as_i64() == Some(1))
        .unwrap_or_else(|| panic!("one node holds the session: {view}"));
    owner["node_id"].as_str().unwrap()["node-".len()..]
        .parse()
        .unwrap()
}

/// A rolling restart under steady chat load: each node in turn gets SIGTERM (it drains and
/// hands its sessions over), exits 0 and starts again, while a client keeps messaging three
/// sessions through the nodes that are up. No request fails (a connection a stopping node
/// refuses is a reconnect, tried on another node); every answered message is in its journal
/// once, and the journals have no gaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_chat_load_fails_no_request() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    let mut cluster = Cluster::start(3).await;
    let bases: Vec<String> = (0..3).map(|i| cluster.node(i).base.clone()).collect();
    let mut sessions = Vec::new();
    let mut tokens = Vec::new();
    for i in 0..3 {
        let (id, token) = cluster.node(i).create("ops").await;
        sessions.push(id);
        tokens.push(token);
    }
    // The third session held by node 2 (restarted last); a WebSocket to it through every
    // node, those on nodes 0 and 1 proxied. Each must end with 1001 when its own node drains
    // — a proxying node closes its proxied clients as it closes its own — so that the client
    // knows to reconnect and resume.
    let (status, _) = cluster.node(2).say(&sessions[2], "hello").await;
    assert_eq!(status, 200);
    let mut sockets = Vec::new();
    for i in 0..3 {
        let mut ws = cluster.node(i).ws(&sessions[2], &tokens[2], "").await;
        assert_eq!(ws.next().await.expect("hello")["type"], "hello");
        sockets.push(ws);
    }
    let closes = tokio::spawn(async move {
        let mut codes = Vec::new();
        for mut ws in sockets {
            codes.push(close_code(&mut ws).await);
        }
        codes
    });
    let down: Arc<Vec<AtomicBool>> = Arc::new((0..3).map(|_| AtomicBool::new(false)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let reconnects = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let load = {
        let (down, stop, failures, reconnects, answered) = (
            down.clone(),
            stop.clone(),
            failures.clone(),
            reconnects.clone(),
            answered.clone(),
        );
        let sessions = sessions.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let session = &sessions[n % sessions.len()];
                let text = format!("message {n}");
                let mut node = n % 3;
                loop {
                    if down[node].load(Ordering::Relaxed) {
                        node = (node + 1) % 3;
                        continue;
                    }
                    let sent = client
                        .post(format!(
                            "{}/v1/sessions/{session}/messages?wait=true",
                            bases[node]
                        ))
                        .json(&json!({ "text": text }))
                        .send()
                        .await;
                    match sent {
                        Ok(response) if response.status() == 200 => {
                            answered
                                .lock()
                                .unwrap()
                                .push((session.clone(), text.clone()));
                            break;
                        }
                        Ok(response) => {
                            let status = response.status();
                            let body = response.text().await.unwrap_or_default();
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("node {node}: {status} {body}"));
                            break;
                        }
                        // The node stopped accepting between the check and the send.
                        Err(error) if error.is_connect() => {
                            reconnects.fetch_add(1, Ordering::Relaxed);
                            node = (node + 1) % 3;
                        }
                        Err(error) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("node {node}: {error}"));
                            break;
                        }
                    }
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..3 {
        down[i].store(true, Ordering::Relaxed);
        cluster.restart(i);
        down[i].store(false, Ordering::Relaxed);
        eprintln!("rolling restart: node {i} is back");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let codes = tokio::time::timeout(Duration::from_secs(30), closes)
        .await
        .expect("every WebSocket closed")
        .unwrap();
    assert_eq!(codes, [Some(1001); 3], "each WebSocket ended with 1001");
    let failures = failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "failed requests: {failures:#?}");
    let answered = answered.lock().unwrap().clone();
    eprintln!(
        "rolling restart: {} messages answered, {} reconnects, 0 failures",
        answered.len(),
        reconnects.load(Ordering::Relaxed)
    );
    assert!(
        answered.len() > 30,
        "the load kept going: {}",
        answered.len()
    );
    for session in &sessions {
        let journal = cluster.node(0).journal(session).await;
        let seqs: Vec<i64> = journal.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "no gaps");
        let texts: Vec<&str> = journal
            .iter()
            .filter(|e| e["kind"] == "user_message")
            .filter_map(|e| e["payload"]["text"].as_str())
            .collect();
        for (_, text) in answered.iter().filter(|(s, _)| s == session) {
            let copies = texts.iter().filter(|t| *t == text).count();
            assert_eq!(copies, 1, "{text} is in {session}'s journal once");
        }
    }
}

/// The close code a WebSocket ends with (frames before it skipped); `None` when it ended
/// without a close frame.
async fn close_code(ws: &mut stead_testkit::client::Ws) -> Option<u16> {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        match ws.stream.next().await {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

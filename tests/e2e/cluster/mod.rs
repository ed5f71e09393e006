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

mod budgets;
mod chaos;
mod identity;
mod rolling;

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
    } else if text.contains("metered") {
        // Ten completion tokens after 300 ms: what the budget test reserves, exactly.
        Reply::Text {
            text: "Metered.".into(),
            delay: Duration::from_millis(300),
            chunk_delay: Duration::ZERO,
            completion_tokens: 10,
        }
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
        Self::start_configured(size, lease_ttl, "", "").await
    }

    /// `server`: keys added to each node's `[server]`; `extra`: TOML appended to its
    /// configuration.
    async fn start_configured(size: usize, lease_ttl: u64, server: &str, extra: &str) -> Cluster {
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
{server}

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
{extra}
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

/// A client that vanishes behind a proxying node — it stops reading and answering pings, its
/// TCP connection still open — does not hold its WebSocket slot on the owner for good: the
/// owner hears the proxying node answer its pings, so it is the proxying node that notices
/// three silent heartbeats and closes the owner's socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_vanishes_behind_a_proxy_frees_its_slot_on_the_owner() {
    let cluster = Cluster::start_configured(
        2,
        LEASE_TTL,
        "ws_heartbeat_secs = 1\nmax_websockets_per_session = 2",
        "",
    )
    .await;
    let (id, token) = cluster.node(0).create("ops").await;
    let (status, body) = cluster.node(0).say(&id, "hello").await;
    assert_eq!(status, 200, "{body}");
    // Two sockets through node 1, proxied to the owner, node 0: read up to `hello`, then
    // never read again (no pong is sent, nothing is closed).
    let mut silent = Vec::new();
    for _ in 0..2 {
        let mut ws = cluster.node(1).ws(&id, &token, "").await;
        assert_eq!(ws.next().await.expect("hello")["type"], "hello");
        silent.push(ws);
    }
    let url = format!(
        "{}/v1/sessions/{id}/ws?token={token}",
        cluster.node(0).base.replace("http://", "ws://")
    );
    match tokio_tungstenite::connect_async(url.as_str()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 429, "the session's two slots are taken")
        }
        other => panic!("a third socket while two are held: {:?}", other.map(|_| ())),
    }
    // Three silent heartbeats (1 s each) later the proxy gives up and the owner frees them.
    let started = Instant::now();
    loop {
        if tokio_tungstenite::connect_async(url.as_str()).await.is_ok() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the owner still holds the vanished clients' slots"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "cluster: vanished clients' slots freed {} ms after the check began",
        started.elapsed().as_millis()
    );
    drop(silent);
}

//! The session actor end to end on the real SQLite store, with a scripted model (a test double
//! that answers from a script) and a webhook endpoint double that counts calls by key.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use stead_actors::session::{Agent, Frame, Lifecycle, ModelClient, ModelRequest, SessionRegistry};
use stead_actors::tools::{ClockTool, Tool, ToolInfo, WebhookTool};
use stead_actors::{
    AgentRules, ApprovalPolicy, ApprovalScope, Input, ModelOutput, SessionEvent, ToolRules, Usage,
};
use stead_persistence::{DatabaseUrl, JournalStore, NewSession, StoreOptions};
use tokio::sync::mpsc::UnboundedSender;

/// One scripted answer: text and `(tool, arguments)` calls.
type Answer = (String, Vec<(String, Value)>);

/// A model double: each call pops the next scripted answer; it records how many calls it got.
struct ScriptedModel {
    script: Mutex<Vec<Answer>>,
    calls: Mutex<usize>,
}

impl ScriptedModel {
    fn new(script: Vec<(&str, Vec<(&str, Value)>)>) -> Arc<Self> {
        Arc::new(ScriptedModel {
            script: Mutex::new(
                script
                    .into_iter()
                    .map(|(t, c)| {
                        (
                            t.to_string(),
                            c.into_iter().map(|(n, a)| (n.to_string(), a)).collect(),
                        )
                    })
                    .collect(),
            ),
            calls: Mutex::new(0),
        })
    }
}

#[async_trait]
impl ModelClient for ScriptedModel {
    async fn complete(
        &self,
        request: ModelRequest,
        deltas: UnboundedSender<String>,
        _cancel: Arc<AtomicBool>,
    ) -> Result<ModelOutput, stead_actors::session::ModelError> {
        assert!(!request.transcript.is_empty());
        *self.calls.lock().unwrap() += 1;
        let (text, tool_calls) = {
            let mut script = self.script.lock().unwrap();
            if script.is_empty() {
                ("(script ended)".to_string(), vec![])
            } else {
                script.remove(0)
            }
        };
        for word in text.split_inclusive(' ') {
            let _ = deltas.send(word.to_string());
        }
        Ok(ModelOutput {
            text,
            tool_calls,
            usage: Usage {
                prompt_tokens: 7,
                completion_tokens: 3,
            },
            provider: "scripted".into(),
            model: "double".into(),
            latency_ms: 1.0,
            ttft_ms: 0.1,
            cost: 0.0,
        })
    }
}

#[derive(Clone, Default)]
struct Endpoint {
    keys: Arc<Mutex<Vec<String>>>,
}

async fn webhook_double(
    State(e): State<Endpoint>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Json<Value> {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    e.keys.lock().unwrap().push(key.to_string());
    Json(json!({ "deleted": body["arguments"]["table"] }))
}

async fn endpoint() -> (String, Endpoint) {
    let e = Endpoint::default();
    let app = Router::new()
        .route("/delete", post(webhook_double))
        .with_state(e.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/delete", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, e)
}

fn agent(url: &str) -> Agent {
    let info = |name: &str, approval| ToolInfo {
        name: name.into(),
        description: format!("the {name} tool"),
        approval,
        idempotent: true,
    };
    let mut tools: BTreeMap<String, Arc<dyn Tool>> = BTreeMap::new();
    tools.insert(
        "clock".into(),
        Arc::new(ClockTool {
            info: info("clock", ApprovalPolicy::Never),
        }),
    );
    tools.insert(
        "delete_records".into(),
        Arc::new(WebhookTool {
            info: info("delete_records", ApprovalPolicy::Always),
            url: url.into(),
            parameters: json!({"type": "object", "properties": {"table": {"type": "string"}}}),
            timeout: Duration::from_secs(5),
            attempts: 3,
            client: reqwest::Client::new(),
        }),
    );
    let rules = AgentRules {
        route: "default".into(),
        max_steps: 8,
        tools: tools
            .iter()
            .map(|(name, t)| {
                (
                    name.clone(),
                    ToolRules {
                        approval: t.approval().clone(),
                        idempotent: t.idempotent(),
                    },
                )
            })
            .collect(),
        approval_timeout: None,
    };
    Agent {
        name: "ops".into(),
        system_prompt: "You are ops.".into(),
        rules,
        tools,
    }
}

async fn wait_for(frames: &mut tokio::sync::mpsc::Receiver<Frame>, kind: &str) -> Vec<Frame> {
    let mut seen = Vec::new();
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(20), frames.recv())
            .await
            .unwrap_or_else(|_| panic!("no `{kind}` event; saw {seen:?}"))
            .expect("stream open");
        let done = matches!(&frame, Frame::Event { event, .. } if event.to_parts().0 == kind);
        seen.push(frame);
        if done {
            return seen;
        }
    }
}

/// Sends a user message and waits for its commit.
async fn say(registry: &SessionRegistry, id: uuid::Uuid, text: &str) {
    registry
        .send(
            id,
            Input::UserMessage {
                text: text.into(),
                client_id: None,
            },
        )
        .await
        .unwrap();
}

async fn new_session(store: &Arc<dyn JournalStore>) -> uuid::Uuid {
    store
        .create_session(NewSession::for_agent("ops"))
        .await
        .unwrap()
        .id
}

/// Polls `check` every 10 ms, up to 3 s; true once it holds.
async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    for _ in 0..300 {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

async fn store(dir: &tempfile::TempDir) -> Arc<dyn JournalStore> {
    stead_persistence::open(StoreOptions::new(DatabaseUrl::Sqlite(
        dir.path().join("s.db"),
    )))
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_streams_deltas_and_journals_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = endpoint().await;
    let model = ScriptedModel::new(vec![
        ("", vec![("clock", json!({}))]),
        ("It is noon now.", vec![]),
    ]);
    let registry = SessionRegistry::new(store.clone(), model.clone(), vec![agent(&url)]);
    let id = new_session(&store).await;
    let mut frames = registry.subscribe(id).await.unwrap();
    say(&registry, id, "time?").await;
    let seen = wait_for(&mut frames, "turn_finished").await;
    let deltas: String = seen
        .iter()
        .filter_map(|f| match f {
            Frame::Delta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "It is noon now.");
    let kinds: Vec<String> = store
        .read(id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "user_message",
            "model_call_started",
            "model_call_finished",
            "tool_call_requested",
            "tool_call_started",
            "tool_call_finished",
            "model_call_started",
            "model_call_finished",
            "assistant_message",
            "turn_finished"
        ]
    );
    assert_eq!(*model.calls.lock().unwrap(), 2);
    registry.stop_all();
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_approval_survives_reactivation_and_the_webhook_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, hits) = endpoint().await;
    let model = ScriptedModel::new(vec![
        ("", vec![("delete_records", json!({"table": "users"}))]),
        ("Deleted.", vec![]),
    ]);
    let id = new_session(&store).await;
    {
        let registry = SessionRegistry::new(store.clone(), model.clone(), vec![agent(&url)]);
        let mut frames = registry.subscribe(id).await.unwrap();
        say(&registry, id, "clean users").await;
        wait_for(&mut frames, "approval_requested").await;
        assert_eq!(
            registry.state(id).await.unwrap().status(),
            "awaiting_approval"
        );
        // The process "stops": every actor goes away while parked.
        registry.stop_all();
    }
    assert!(
        hits.keys.lock().unwrap().is_empty(),
        "nothing ran before the decision"
    );

    // A new registry activates the session from the journal; it is still parked.
    let registry = SessionRegistry::new(store.clone(), model.clone(), vec![agent(&url)]);
    assert_eq!(
        registry.state(id).await.unwrap().status(),
        "awaiting_approval"
    );
    let mut frames = registry.subscribe(id).await.unwrap();
    let decision = Input::Decision {
        call_id: "t1".into(),
        approved: true,
        reason: None,
        decided_by: "ada".into(),
        scope: ApprovalScope::Once,
        args_hash: None,
    };
    registry.send(id, decision.clone()).await.unwrap();
    wait_for(&mut frames, "turn_finished").await;
    assert_eq!(
        *hits.keys.lock().unwrap(),
        vec![format!("{id}:t1")],
        "exactly one webhook call"
    );
    // The same decision again is a typed refusal, and the journal is unchanged.
    let before = store.get_session(id).await.unwrap().last_seq;
    assert!(registry.send(id, decision).await.is_err());
    assert_eq!(store.get_session(id).await.unwrap().last_seq, before);
    let journal = store.read(id, 0, 100).await.unwrap();
    let decided = journal
        .iter()
        .find(|e| e.kind == "approval_decided")
        .unwrap();
    assert_eq!(decided.payload["decided_by"], "ada");
    assert!(matches!(
        SessionEvent::from_parts(
            &journal.last().unwrap().kind,
            &journal.last().unwrap().payload
        ),
        Some(SessionEvent::TurnFinished { .. })
    ));
    registry.stop_all();
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_live_actor_per_session_under_concurrent_activation() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = endpoint().await;
    let registry = Arc::new(SessionRegistry::new(
        store.clone(),
        ScriptedModel::new(vec![]),
        vec![agent(&url)],
    ));
    let id = new_session(&store).await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let registry = registry.clone();
        tasks.push(tokio::spawn(async move {
            registry.session(id).await.unwrap().get_id()
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "every caller got the same actor");
    registry.stop_all();
    store.shutdown().await;
}

/// A tool double with bugs: its schema accessor — which runs inside the session actor's
/// handler — panics its first `schema_panics` times (`u32::MAX`: always), a bug that takes the
/// actor down; with `execute_panics`, running it panics (inside the tool's own task).
struct FaultyTool {
    info: ToolInfo,
    schema_panics: std::sync::atomic::AtomicU32,
    execute_panics: bool,
}

impl FaultyTool {
    fn new(name: &str, schema_panics: u32, execute_panics: bool) -> Arc<Self> {
        Arc::new(FaultyTool {
            info: ToolInfo {
                name: name.into(),
                description: String::new(),
                approval: ApprovalPolicy::Never,
                idempotent: true,
            },
            schema_panics: std::sync::atomic::AtomicU32::new(schema_panics),
            execute_panics,
        })
    }
}

#[async_trait]
impl Tool for FaultyTool {
    fn name(&self) -> &str {
        &self.info.name
    }
    fn description(&self) -> &str {
        ""
    }
    fn parameters(&self) -> Value {
        use std::sync::atomic::Ordering;
        let left = self.schema_panics.load(Ordering::SeqCst);
        if left > 0 {
            self.schema_panics
                .store(left.saturating_sub(1), Ordering::SeqCst);
            panic!("schema bug");
        }
        json!({"type": "object"})
    }
    fn approval(&self) -> &ApprovalPolicy {
        &self.info.approval
    }
    fn idempotent(&self) -> bool {
        true
    }
    async fn execute(
        &self,
        _: Value,
        _: &stead_actors::tools::ToolContext,
    ) -> Result<Value, stead_actors::tools::ToolError> {
        if self.execute_panics {
            panic!("the tool exploded");
        }
        Ok(json!({}))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_is_contained_and_other_sessions_are_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = endpoint().await;
    let mut ops = agent(&url);
    ops.tools
        .insert("explode".into(), FaultyTool::new("explode", 0, true));
    ops.rules.tools.insert(
        "explode".into(),
        ToolRules {
            approval: ApprovalPolicy::Never,
            idempotent: true,
        },
    );
    let model = ScriptedModel::new(vec![
        ("", vec![("explode", json!({}))]),
        ("That tool failed.", vec![]),
        ("Hello from the other session.", vec![]),
    ]);
    let registry = SessionRegistry::new(store.clone(), model, vec![ops]);
    let a = new_session(&store).await;
    let b = new_session(&store).await;
    let mut frames_a = registry.subscribe(a).await.unwrap();
    say(&registry, a, "boom").await;
    wait_for(&mut frames_a, "turn_finished").await;
    let journal = store.read(a, 0, 100).await.unwrap();
    let failed = journal
        .iter()
        .find(|e| e.kind == "tool_call_failed")
        .expect("the crash is journaled");
    assert!(failed.payload["error"]
        .as_str()
        .unwrap()
        .contains("the tool exploded"));

    let mut frames_b = registry.subscribe(b).await.unwrap();
    say(&registry, b, "hi").await;
    wait_for(&mut frames_b, "turn_finished").await;
    assert_eq!(registry.state(a).await.unwrap().status(), "idle");
    registry.stop_all();
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_actor_is_fenced_out_and_reactivates_from_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = endpoint().await;
    let model = ScriptedModel::new(vec![("first", vec![]), ("second", vec![])]);
    let registry = SessionRegistry::new(store.clone(), model, vec![agent(&url)]);
    let id = new_session(&store).await;
    let state = registry.state(id).await.unwrap();
    // Another writer (another node, say) appends behind the actor's back.
    let (kind, payload) = SessionEvent::UserMessage {
        text: "from elsewhere".into(),
        client_id: None,
    }
    .to_parts();
    store
        .append(
            id,
            state.last_seq,
            vec![stead_persistence::NewEvent::new(kind, payload)],
        )
        .await
        .unwrap();
    // The actor's next append conflicts: it refuses and stops instead of acting on stale state.
    let refused = registry
        .send(
            id,
            Input::UserMessage {
                text: "mine".into(),
                client_id: None,
            },
        )
        .await;
    assert!(refused.is_err());
    // The next access re-activates from the journal, which now includes the other message.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let state = registry.state(id).await.unwrap();
    assert!(state.transcript.iter().any(
        |e| matches!(e, stead_actors::TranscriptEntry::User { text } if text == "from elsewhere")
    ));
    registry.stop_all();
    store.shutdown().await;
}

fn fold_all(journal: &[stead_persistence::Event]) -> stead_actors::SessionState {
    let mut state = stead_actors::SessionState::default();
    for e in journal {
        state.apply(
            e.seq,
            &SessionEvent::from_parts(&e.kind, &e.payload).unwrap(),
        );
    }
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_passivate_and_come_back_from_snapshot_and_journal() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = endpoint().await;
    let model = ScriptedModel::new(vec![("", vec![("clock", json!({}))]), ("Noon.", vec![])]);
    let lifecycle = Lifecycle {
        snapshot_every: 4,
        passivate_after: Duration::from_millis(60),
        ..Lifecycle::default()
    };
    let registry =
        SessionRegistry::new(store.clone(), model, vec![agent(&url)]).with_lifecycle(lifecycle);
    let id = new_session(&store).await;
    {
        let mut frames = registry.subscribe(id).await.unwrap();
        say(&registry, id, "time?").await;
        wait_for(&mut frames, "turn_finished").await;
    } // the subscriber goes away
    let before = registry.state(id).await.unwrap();
    let snapshot = store
        .latest_snapshot(id)
        .await
        .unwrap()
        .expect("a snapshot was written");
    assert!(snapshot.seq >= 4 && snapshot.seq <= before.last_seq);

    assert!(
        eventually(|| !registry.is_live(id)).await,
        "an idle session with no subscribers passivates"
    );

    // Re-activation (snapshot + journal after it) equals the state before and a full replay.
    let after = registry.state(id).await.unwrap();
    assert_eq!(after, before);
    assert_eq!(after, fold_all(&store.read(id, 0, 1000).await.unwrap()));
    registry.stop_all();
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_approval_expires() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, hits) = endpoint().await;
    let mut ops = agent(&url);
    ops.rules.approval_timeout = Some(Duration::from_millis(100));
    let model = ScriptedModel::new(vec![
        ("", vec![("delete_records", json!({"table": "users"}))]),
        ("Nobody approved it.", vec![]),
    ]);
    let registry = SessionRegistry::new(store.clone(), model, vec![ops]);
    let id = new_session(&store).await;
    let mut frames = registry.subscribe(id).await.unwrap();
    say(&registry, id, "clean").await;
    wait_for(&mut frames, "turn_finished").await;
    let journal = store.read(id, 0, 100).await.unwrap();
    let decided = journal
        .iter()
        .find(|e| e.kind == "approval_decided")
        .unwrap();
    assert_eq!(decided.payload["approved"], false);
    assert_eq!(decided.payload["reason"], "expired");
    assert!(
        hits.keys.lock().unwrap().is_empty(),
        "an expired call never runs"
    );
    registry.stop_all();
    store.shutdown().await;
}

/// The `ops` agent plus the panicking tool, under the agent name `fragile`.
fn fragile_agent(url: &str, panics: u32) -> Agent {
    let mut fragile = agent(url);
    fragile.name = "fragile".into();
    fragile
        .tools
        .insert("schema".into(), FaultyTool::new("schema", panics, false));
    fragile
}

fn quick_restarts() -> Lifecycle {
    Lifecycle {
        restart_limit: 3,
        restart_backoff: Duration::from_millis(20),
        restart_backoff_max: Duration::from_millis(100),
        ..Lifecycle::default()
    }
}

async fn journal_kinds(store: &Arc<dyn JournalStore>, id: uuid::Uuid) -> Vec<String> {
    let events = store.read(id, 0, 1000).await.unwrap();
    events.into_iter().map(|e| e.kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_actor_is_restarted_from_the_journal_and_the_turn_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = endpoint().await;
    let model = ScriptedModel::new(vec![("Recovered.", vec![])]);
    let registry = SessionRegistry::new(store.clone(), model.clone(), vec![fragile_agent(&url, 2)])
        .with_lifecycle(quick_restarts());
    let id = store
        .create_session(NewSession::for_agent("fragile"))
        .await
        .unwrap()
        .id;
    let first = registry.session(id).await.unwrap().get_id();
    say(&registry, id, "hello").await;
    // Two crashes (below the limit of 3), two restarts; the third actor finishes the turn.
    let mut finished = false;
    for _ in 0..300 {
        if journal_kinds(&store, id)
            .await
            .contains(&"turn_finished".to_string())
        {
            finished = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        finished,
        "the turn finished after restarts: {:?}",
        journal_kinds(&store, id).await
    );
    let state = registry.state(id).await.unwrap();
    assert_eq!(state.status(), "idle");
    assert_ne!(
        registry.session(id).await.unwrap().get_id(),
        first,
        "a new actor"
    );
    let kinds = journal_kinds(&store, id).await;
    assert_eq!(kinds.iter().filter(|k| *k == "user_message").count(), 1);
    assert_eq!(
        kinds.iter().filter(|k| *k == "model_call_finished").count(),
        1
    );
    assert!(!kinds.contains(&"session_failed".to_string()));
    assert_eq!(*model.calls.lock().unwrap(), 1, "the model answered once");
    assert_eq!(
        store.get_session(id).await.unwrap().status.as_str(),
        "idle",
        "the row's status follows the journal"
    );
    registry.stop_all();
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_that_keeps_crashing_fails_its_session_with_the_reason_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = endpoint().await;
    let model = ScriptedModel::new(vec![("Hello from ops.", vec![])]);
    let registry = SessionRegistry::new(
        store.clone(),
        model,
        vec![fragile_agent(&url, u32::MAX), agent(&url)],
    )
    .with_lifecycle(quick_restarts());
    let doomed = store
        .create_session(NewSession::for_agent("fragile"))
        .await
        .unwrap()
        .id;
    let healthy = new_session(&store).await;
    let mut healthy_frames = registry.subscribe(healthy).await.unwrap();
    say(&registry, doomed, "hello").await;

    let mut failed = None;
    for _ in 0..500 {
        let events = store.read(doomed, 0, 1000).await.unwrap();
        let row = store.get_session(doomed).await.unwrap();
        if let Some(e) = events.iter().find(|e| e.kind == "session_failed") {
            if row.status.as_str() == "failed" {
                failed = Some(e.payload.clone());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let failed = failed.expect("session_failed is journaled and the row says failed");
    let reason = failed["reason"].as_str().unwrap();
    assert!(
        reason.contains("3 times") && reason.contains("schema bug"),
        "{reason}"
    );
    assert_eq!(
        store.get_session(doomed).await.unwrap().status.as_str(),
        "failed"
    );

    // A failed session still answers reads, refuses new input and leaves the journal alone.
    let before = store.read(doomed, 0, 1000).await.unwrap();
    assert_eq!(registry.state(doomed).await.unwrap().status(), "failed");
    let refused = registry
        .send(
            doomed,
            Input::UserMessage {
                text: "again".into(),
                client_id: None,
            },
        )
        .await;
    assert_eq!(
        refused,
        Err(stead_actors::session::SessionError::Refused(
            stead_actors::Refusal::Ended
        ))
    );
    assert_eq!(store.read(doomed, 0, 1000).await.unwrap(), before);

    // Other sessions are untouched.
    say(&registry, healthy, "hi").await;
    wait_for(&mut healthy_frames, "turn_finished").await;
    assert_eq!(registry.state(healthy).await.unwrap().status(), "idle");
    registry.stop_all();
    store.shutdown().await;
}

/// Two nodes (two registries with distinct lease owner names) on one database: a live lease
/// keeps the session on its node; a takeover fences every later write of the earlier holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_keep_a_session_on_one_node_and_fence_a_stale_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = endpoint().await;
    let model = ScriptedModel::new(vec![("from b", vec![])]);
    let node_a =
        SessionRegistry::new(store.clone(), model.clone(), vec![agent(&url)]).with_node("node-a");
    let node_b =
        SessionRegistry::new(store.clone(), model.clone(), vec![agent(&url)]).with_node("node-b");
    let id = new_session(&store).await;
    node_a.state(id).await.unwrap();
    assert_eq!(
        node_b.state(id).await.unwrap_err(),
        stead_actors::session::SessionError::HeldElsewhere("node-a".into())
    );

    // Node A's lease goes away behind its back (as if it had stalled past its TTL); B takes
    // the session over and works in it.
    let lease = store
        .acquire_lease(id, "node-a", Duration::from_secs(60))
        .await
        .unwrap();
    store
        .release_lease(id, "node-a", lease.epoch)
        .await
        .unwrap();
    let mut frames = node_b.subscribe(id).await.unwrap();
    say(&node_b, id, "hello from b").await;
    wait_for(&mut frames, "turn_finished").await;
    let journal = store.read(id, 0, 100).await.unwrap();

    // A's stale actor still answers; its next write is fenced, and nothing is written.
    let refused = node_a
        .send(
            id,
            Input::UserMessage {
                text: "from a".into(),
                client_id: None,
            },
        )
        .await;
    assert!(
        matches!(refused, Err(stead_actors::session::SessionError::Journal(ref m)) if m.contains("taken over")),
        "{refused:?}"
    );
    assert_eq!(store.read(id, 0, 100).await.unwrap(), journal);
    assert!(
        eventually(|| !node_a.is_live(id)).await,
        "the stale actor stopped"
    );

    // When B stops (its lease is released), A can activate it again at once.
    node_b.stop_all();
    let mut back = false;
    for _ in 0..100 {
        if node_a.state(id).await.is_ok() {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(back, "A takes the session back after B released it");
    node_a.stop_all();
    store.shutdown().await;
}

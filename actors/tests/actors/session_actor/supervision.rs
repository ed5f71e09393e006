//! Supervision: a panicking tool is contained; a crashed actor is restarted from the journal;
//! one that keeps crashing fails its session.

use async_trait::async_trait;
use serde_json::Value;
use stead_actors::session::Lifecycle;

use super::*;

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
    let (url, _) = ops::webhook().await;
    let mut ops = agent(&url);
    ops.tools
        .insert("explode".into(), FaultyTool::new("explode", 0, true));
    ops.rules.tools.insert(
        "explode".into(),
        ToolRules {
            approval: ApprovalPolicy::Never,
            idempotent: true,
            arguments: Default::default(),
            approver: Default::default(),
            builtin: None,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_actor_is_restarted_from_the_journal_and_the_turn_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = ops::webhook().await;
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
    // Two crashes (below the limit of 3), two restarts; the third actor finishes the turn. The
    // wait is long (30 s) because a loaded machine slows the restarts, not because they are.
    let mut finished = false;
    for _ in 0..3000 {
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
    assert_eq!(model.calls(), 1, "the model answered once");
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
    let (url, _) = ops::webhook().await;
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
                mode: None,
                attachments: Vec::new(),
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

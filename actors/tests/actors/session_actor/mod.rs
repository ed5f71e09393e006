//! The session actor end to end on the real SQLite store, with a scripted model (a test double
//! that answers from a script) and a webhook endpoint double that counts calls by key. By
//! topic: turns and approvals (`turns`), supervision of crashing actors (`supervision`), and
//! fencing of a stale actor on one node or across two (`fencing`).

mod activation;
mod agent_schedules;
mod children;
mod context;
mod delegation;
mod fencing;
mod fold;
mod mid_turn;
mod schedule_rules;
mod schedule_tool;
mod schedules;
mod supervision;
mod turns;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use stead_actors::session::{Agent, Frame, SessionRegistry, SharedFrame};
use stead_actors::tools::{ClockTool, Tool, ToolInfo, WebhookTool};
use stead_actors::{AgentRules, ApprovalPolicy, Input, SessionEvent, ToolRules};
use stead_persistence::{DatabaseUrl, JournalStore, NewSession, StoreOptions};
use stead_testkit::model::ScriptedModel;
use stead_testkit::ops;

fn agent(url: &str) -> Agent {
    let info = |name: &str, approval| ToolInfo {
        name: name.into(),
        description: format!("the {name} tool"),
        approval,
        idempotent: true,
    };
    let mut tools: stead_actors::session::AgentTools = Default::default();
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
            headers: Default::default(),
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
                        arguments: Default::default(),
                        approver: Default::default(),
                        builtin: None,
                    },
                )
            })
            .collect(),
        approval_timeout: None,
        dynamic: Vec::new(),
        message_mode: Default::default(),
        schedules: Default::default(),
        callbacks: Default::default(),
        delegation: Default::default(),
        context: Default::default(),
    };
    Agent {
        name: "ops".into(),
        system_prompt: "You are ops.".into(),
        rules,
        tools,
        dynamic: None,
        guardrails: None,
    }
}

async fn wait_for(frames: &mut tokio::sync::mpsc::Receiver<SharedFrame>, kind: &str) -> Vec<Frame> {
    let mut seen = Vec::new();
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(20), frames.recv())
            .await
            .unwrap_or_else(|_| panic!("no `{kind}` event; saw {seen:?}"))
            .expect("stream open");
        let done = matches!(&*frame, Frame::Event { event, .. } if event.to_parts().0 == kind);
        seen.push(Arc::unwrap_or_clone(frame));
        if done {
            return seen;
        }
    }
}

/// Ada's approval of `call_id`, once.
fn approve(call_id: impl Into<String>) -> Input {
    Input::Decision {
        call_id: call_id.into().into(),
        approved: true,
        reason: None,
        decided_by: "ada".into(),
        scope: stead_actors::ApprovalScope::Once,
        args_hash: None,
        overspend_usd: None,
        may_spend: true,
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
                mode: None,
                attachments: Vec::new(),
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

async fn journal_kinds(store: &Arc<dyn JournalStore>, id: uuid::Uuid) -> Vec<String> {
    let events = store.read(id, 0, 1000).await.unwrap();
    events.into_iter().map(|e| e.kind).collect()
}

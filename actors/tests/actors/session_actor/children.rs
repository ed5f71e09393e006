//! Sub-agents through the session actors and the scheduler, on SQLite and PostgreSQL: a
//! coordinator's `agent` tool call starts a child session of another agent (its id derived
//! from the parent's call, its row and `session_created` naming the parent), the child answers
//! the task in its own turn, and its reply comes back to the parent through the database (a
//! due-index row the scheduler delivers) as the call's result — once, even when the start and
//! the wake-up are repeated, and when a recovery finds the child already answered; and
//! cancelling the parent's turn cancels the child's.

use serde_json::Value;
use stead_actors::agent_tool::{child_session_id, start_child, AgentTool};
use stead_actors::schedule_tool::Builtin;
use stead_actors::session::{Scheduler, SchedulerOptions};
use stead_actors::TranscriptEntry;
use stead_persistence::Backend;
use stead_testkit::db;

use super::*;

stead_testkit::both_backends!(
    a_child_session_answers_its_parents_call_once,
    a_child_that_answered_before_a_crash_still_answers_its_recovered_parent,
    cancelling_the_parents_turn_cancels_the_childs,
);

/// `lead` delegates research to `researcher` (no approval).
fn agents() -> Vec<Agent> {
    let mut lead = agent("http://127.0.0.1:9");
    lead.name = "lead".into();
    lead.system_prompt = "You coordinate.".into();
    let tool = AgentTool {
        info: ToolInfo {
            name: "research".into(),
            description: "Ask the researcher".into(),
            approval: ApprovalPolicy::Never,
            idempotent: true,
        },
        agent: "researcher".into(),
        parameters: AgentTool::default_parameters(),
    };
    lead.rules.tools.insert(
        "research".into(),
        ToolRules {
            approval: ApprovalPolicy::Never,
            idempotent: true,
            arguments: stead_actors::ArgumentSchema::compile(&tool.parameters()).unwrap(),
            approver: Default::default(),
            builtin: Some(Builtin::Agent {
                agent: "researcher".into(),
            }),
        },
    );
    lead.tools.insert("research".into(), Arc::new(tool));
    let mut researcher = agent("http://127.0.0.1:9");
    researcher.name = "researcher".into();
    researcher.system_prompt = "You research.".into();
    vec![lead, researcher]
}

/// The researcher answers; the coordinator delegates, then reports what came back.
fn model() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::respond(|request| {
        if request.system_prompt == "You research." {
            return ("Findings: Rayleigh scattering.".into(), vec![]);
        }
        let result = request.transcript.iter().find_map(|e| match e {
            TranscriptEntry::Tool { content, .. } => Some(content.clone()),
            _ => None,
        });
        match result {
            Some(content) => (format!("Done: {}", content["reply"]), vec![]),
            None => (
                String::new(),
                vec![(
                    "research".to_string(),
                    json!({"task": "Why is the sky blue?"}),
                )],
            ),
        }
    }))
}

async fn kinds_of(store: &Arc<dyn JournalStore>, id: uuid::Uuid) -> Vec<(String, Value)> {
    store
        .read(id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.payload))
        .collect()
}

/// A store, a registry with both agents answered by `model`, a scheduler that looks every
/// 100 ms, and a session of `lead`.
async fn tree(
    backend: Backend,
    model: Arc<ScriptedModel>,
) -> (
    db::TestStore,
    SessionRegistry,
    tokio::task::JoinHandle<()>,
    uuid::Uuid,
) {
    let db = db::open(backend).await;
    let registry = SessionRegistry::new(db.store.clone(), model, agents());
    let options = SchedulerOptions {
        poll: Duration::from_millis(100),
        ..Default::default()
    };
    let scheduler = Scheduler::new(registry.clone(), options).spawn();
    let parent = db
        .store
        .create_session(NewSession {
            project_id: stead_persistence::DEFAULT_PROJECT,
            metadata: json!({"customer": "acme"}),
            ..NewSession::for_agent("lead")
        })
        .await
        .unwrap()
        .id;
    (db, registry, scheduler, parent)
}

async fn a_child_session_answers_its_parents_call_once(backend: Backend) {
    let (db, registry, scheduler, parent) = tree(backend, model()).await;
    let store = db.store.clone();
    let mut frames = registry.subscribe(parent).await.unwrap();
    say(&registry, parent, "Find out why the sky is blue.").await;
    wait_for(&mut frames, "turn_finished").await;

    let child = child_session_id(parent, "t1");
    let journal = kinds_of(&store, parent).await;
    let started = journal
        .iter()
        .find(|(k, _)| k == "child_session_started")
        .unwrap();
    assert_eq!(
        started.1,
        json!({"call_id": "t1", "child_session_id": child})
    );
    let result = journal
        .iter()
        .find(|(k, _)| k == "tool_call_finished")
        .unwrap();
    assert_eq!(
        result.1["result"],
        json!({"reply": "Findings: Rayleigh scattering.", "child_session_id": child})
    );
    let answer = journal
        .iter()
        .rev()
        .find(|(k, _)| k == "assistant_message")
        .unwrap();
    assert_eq!(answer.1["text"], "Done: \"Findings: Rayleigh scattering.\"");

    // The child names its parent, in its row and its journal, and did the task once.
    let row = store.get_session(child).await.unwrap();
    assert_eq!(row.agent, "researcher");
    // With the parent's metadata (a tree's spend reached per-customer reports only
    // for the parent's calls).
    assert_eq!(row.metadata, json!({"customer": "acme"}));
    let link = row.parent.unwrap();
    assert_eq!((link.session_id, link.call_id.as_str()), (parent, "t1"));
    let child_journal = kinds_of(&store, child).await;
    // …and the parent's message it descends from (its turn's budget).
    let mut link = child_journal[0].1["parent"].clone();
    let message = link.as_object_mut().unwrap().remove("message").unwrap();
    assert_eq!(
        link,
        json!({"session_id": parent, "call_id": "t1", "depth": 1})
    );
    assert_eq!(message["session_id"], json!(parent));
    assert!(message["turn_seq"].as_i64().unwrap() > 0, "{message}");
    let tasks: Vec<&Value> = child_journal
        .iter()
        .filter(|(k, _)| k == "user_message")
        .map(|(_, p)| p)
        .collect();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["text"], "Why is the sky blue?");

    // Starting it again (a recovery) finds the same child and asks nothing twice; a second
    // wake-up of the parent delivers nothing.
    let link = stead_actors::events::ParentRef {
        session_id: parent.to_string(),
        call_id: "t1".into(),
        depth: 1,
        delegation: None,
        message: None,
    };
    let again = start_child(
        store.as_ref(),
        parent,
        link,
        "local",
        "researcher",
        "Why is the sky blue?".into(),
        json!({"customer": "acme"}),
    )
    .await
    .unwrap();
    assert_eq!(again, child);
    let before = store.read(parent, 0, 1000).await.unwrap().len();
    assert!(registry
        .send(
            parent,
            Input::ChildFinished {
                call_id: "t1".into()
            }
        )
        .await
        .is_err());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.read(parent, 0, 1000).await.unwrap().len(), before);
    assert_eq!(
        kinds_of(&store, child)
            .await
            .iter()
            .filter(|(k, _)| k == "user_message")
            .count(),
        1
    );
    let stored = stead_actors::replay::check(
        parent,
        &json!({}),
        &store.read(parent, 0, 1000).await.unwrap(),
        &registry.agent("lead").unwrap().rules,
    )
    .unwrap();
    assert_eq!(stored.divergence, None);
    scheduler.abort();
    registry.stop_all();
}

/// A crash after the child answered but before the parent journaled the child's start: the
/// recovered parent starts the child again (finding it), and the child's wake-up reaches it
/// before the call names the child — refused as stale then. The call still gets the child's
/// answer, once (the delegation crash test found a parent waiting for good here).
async fn a_child_that_answered_before_a_crash_still_answers_its_recovered_parent(backend: Backend) {
    let (db, registry, scheduler, reference) = tree(backend, model()).await;
    let store = db.store.clone();
    // A tree that went all the way, whose journals the crashed one is cut from.
    let mut frames = registry.subscribe(reference).await.unwrap();
    say(&registry, reference, "Find out why the sky is blue.").await;
    wait_for(&mut frames, "turn_finished").await;
    let lead_events = store.read(reference, 0, 1000).await.unwrap();
    let child_events = store
        .read(child_session_id(reference, "t1"), 0, 1000)
        .await
        .unwrap();

    // The crashed tree: the parent's journal up to its call's start, the child's complete.
    let parent = store
        .create_session(NewSession::for_agent("lead"))
        .await
        .unwrap()
        .id;
    let cut: Vec<_> = lead_events
        .iter()
        .take_while(|e| e.kind != "child_session_started")
        .map(|e| stead_persistence::NewEvent::new(e.kind.clone(), e.payload.clone()))
        .collect();
    assert_eq!(cut.last().unwrap().kind, "tool_call_started");
    store.append(parent, 0, cut).await.unwrap();
    let child = child_session_id(parent, "t1");
    store
        .create_session(NewSession {
            project_id: stead_persistence::DEFAULT_PROJECT,
            id: Some(child),
            parent: Some(stead_persistence::ParentLink {
                session_id: parent,
                call_id: "t1".into(),
            }),
            ..NewSession::for_agent("researcher")
        })
        .await
        .unwrap();
    let answered: Vec<_> = child_events
        .iter()
        .map(|e| {
            let mut payload = e.payload.clone();
            if e.kind == "session_created" {
                payload["parent"]["session_id"] = json!(parent);
                if payload["parent"]["message"].is_object() {
                    payload["parent"]["message"]["session_id"] = json!(parent);
                }
            }
            stead_persistence::NewEvent::new(e.kind.clone(), payload)
        })
        .collect();
    let answered_len = answered.len();
    store.append(child, 0, answered).await.unwrap();
    // The child's wake-up of its parent, as the dead process's child left it.
    let row = stead_actors::agent_schedules::wake_now(
        parent,
        "child:t1".into(),
        "researcher",
        json!({"kind": "child_finished", "child_session_id": child}),
    );
    store.put_schedules(&[row]).await.unwrap();

    // The scheduler delivers the wake-up, which activates (recovers) the parent.
    let mut kinds = Vec::new();
    for _ in 0..500 {
        kinds = journal_kinds(&store, parent).await;
        if kinds.last().map(String::as_str) == Some("turn_finished") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("turn_finished"),
        "the recovered parent gets its child's answer: {kinds:?}"
    );
    let journal = kinds_of(&store, parent).await;
    let results: Vec<&Value> = journal
        .iter()
        .filter(|(k, _)| k == "tool_call_finished")
        .map(|(_, p)| &p["result"])
        .collect();
    assert_eq!(
        results,
        [&json!({"reply": "Findings: Rayleigh scattering.", "child_session_id": child})]
    );
    // The child was found, not asked again.
    assert_eq!(
        store.read(child, 0, 1000).await.unwrap().len(),
        answered_len
    );
    scheduler.abort();
    registry.stop_all();
}

/// The researcher parks on an approval; the coordinator's turn is cancelled meanwhile.
fn parking_model() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::respond(|request| {
        if request.system_prompt == "You research." {
            return (
                String::new(),
                vec![("delete_records".to_string(), json!({"table": "logs"}))],
            );
        }
        (
            String::new(),
            vec![("research".to_string(), json!({"task": "Clean the logs."}))],
        )
    }))
}

async fn cancelling_the_parents_turn_cancels_the_childs(backend: Backend) {
    let (db, registry, scheduler, parent) = tree(backend, parking_model()).await;
    let store = db.store.clone();
    let child = child_session_id(parent, "t1");
    say(&registry, parent, "Clean up.").await;
    // The child parks on its approval.
    let mut parked = false;
    for _ in 0..300 {
        // The row can exist a moment before the registry knows the actor: not yet, then.
        if store.get_session(child).await.is_ok()
            && registry
                .state(child)
                .await
                .is_ok_and(|s| s.status() == "awaiting_approval")
        {
            parked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(parked, "the child parks on its approval");
    registry
        .send(
            parent,
            Input::Cancel {
                reason: "the user changed their mind".into(),
            },
        )
        .await
        .unwrap();
    let mut cancelled = false;
    for _ in 0..300 {
        if journal_kinds(&store, child)
            .await
            .contains(&"turn_cancelled".to_string())
        {
            cancelled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(cancelled, "the child's turn is cancelled too");
    let kinds = journal_kinds(&store, parent).await;
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["tool_call_cancelled", "turn_cancelled"]
    );
    // The child's end wakes the parent for nothing: its journal does not move.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(journal_kinds(&store, parent).await, kinds);
    assert!(store
        .list_schedules(&stead_persistence::ScheduleQuery {
            scope: stead_persistence::Scope::Installation,
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .is_empty());
    scheduler.abort();
    registry.stop_all();
}

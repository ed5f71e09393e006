//! The delegation scenario (`stead_testkit::delegation`) through session actors and the
//! scheduler, on SQLite and PostgreSQL: the coordinator's one answer starts two children that
//! run at once, the writer parks on an approval that reaches the parent as `tool_progress`,
//! a person approves it, both replies come back once and the coordinator finishes; the decision
//! check holds for the parent and both children. A fork of the coordinator taken while a child
//! works starts a child of its own and never touches the original. A child that loops stops at
//! the delegation's step limit and its parent hears why; a message whose answer fans out shares
//! one budget of model calls and child sessions across its whole tree.

use stead_actors::agent_tool::child_session_id;
use stead_actors::session::{Scheduler, SchedulerOptions};
use stead_persistence::Backend;
use stead_testkit::db;
use stead_testkit::delegation::{self, DRAFT, FINDINGS};

use super::*;

stead_testkit::both_backends!(
    two_children_run_at_once_and_a_childs_approval_reaches_the_parent,
    a_fork_inside_a_delegation_starts_its_own_child_and_leaves_the_original_alone,
    a_delegation_stops_at_its_step_limit,
    one_messages_fan_out_shares_one_budget_of_calls_and_sessions,
);

/// A store, a registry of `agents` answered by `model`, a scheduler that looks every 100 ms,
/// and a session of `lead`.
async fn tree(
    backend: Backend,
    model: Arc<ScriptedModel>,
    agents: Vec<Agent>,
) -> (
    db::TestStore,
    SessionRegistry,
    tokio::task::JoinHandle<()>,
    uuid::Uuid,
) {
    let db = db::open(backend).await;
    let registry = SessionRegistry::new(db.store.clone(), model, agents);
    let options = SchedulerOptions {
        poll: Duration::from_millis(100),
        ..Default::default()
    };
    let scheduler = Scheduler::new(registry.clone(), options).spawn();
    let lead = db
        .store
        .create_session(NewSession::for_agent("lead"))
        .await
        .unwrap()
        .id;
    (db, registry, scheduler, lead)
}

async fn two_children_run_at_once_and_a_childs_approval_reaches_the_parent(backend: Backend) {
    let (db, registry, scheduler, lead) =
        tree(backend, Arc::new(delegation::model()), delegation::agents()).await;
    let store = db.store.clone();
    let mut frames = registry.subscribe(lead).await.unwrap();
    say(&registry, lead, "Explain the sky, and write a line.").await;

    // The writer's park reaches the parent as progress of its `write` call (t2).
    let writer = child_session_id(lead, "t2");
    let researcher = child_session_id(lead, "t1");
    let parked = loop {
        let frame = tokio::time::timeout(Duration::from_secs(20), frames.recv())
            .await
            .expect("progress within 20 s")
            .expect("stream open");
        if let Frame::Progress { call_id, progress } = &*frame {
            if progress.child_status.as_deref() == Some("awaiting_approval") {
                break (call_id.clone(), progress.clone());
            }
        }
    };
    assert_eq!(parked.0, "t2");
    assert_eq!(parked.1.child_session_id, Some(writer.to_string()));
    assert_eq!(parked.1.text.as_deref(), Some("awaiting approval of clock"));

    // Both calls started together, before either had a result.
    let kinds = journal_kinds(&store, lead).await;
    let answered = kinds
        .iter()
        .position(|k| k == "model_call_finished")
        .unwrap();
    assert_eq!(
        kinds[answered + 3..answered + 5],
        ["tool_call_started", "tool_call_started"],
        "{kinds:?}"
    );

    // A person approves the writer's call; both replies come back and the lead finishes.
    let call = registry.state(writer).await.unwrap().pending_approvals()[0]
        .call_id
        .clone();
    registry.send(writer, approve(call)).await.unwrap();
    let seen = wait_for(&mut frames, "turn_finished").await;
    let answer = seen.iter().find_map(|f| match f {
        Frame::Event { event, .. } => match event.as_ref() {
            SessionEvent::AssistantMessage { text, .. } => Some(text.clone()),
            _ => None,
        },
        _ => None,
    });
    assert_eq!(answer, Some(delegation::lead_answer(FINDINGS, DRAFT)));
    let kinds = journal_kinds(&store, lead).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "tool_call_finished").count(),
        2
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "child_session_started")
            .count(),
        2
    );

    // The decision check holds for the whole tree.
    for (id, agent) in [
        (lead, "lead"),
        (researcher, "researcher"),
        (writer, "writer"),
    ] {
        let journal = store.read(id, 0, 1000).await.unwrap();
        let rules = &registry.agent(agent).unwrap().rules;
        let checked = stead_actors::replay::check(id, &json!({}), &journal, rules).unwrap();
        assert_eq!(checked.divergence, None, "{agent}");
    }
    scheduler.abort();
    registry.stop_all();
}

/// Waits until `id` is parked on an approval; returns the call waiting.
async fn parked_call(registry: &SessionRegistry, id: uuid::Uuid) -> String {
    for _ in 0..500 {
        if let Ok(state) = registry.state(id).await {
            if let Some(call) = state.pending_approvals().first() {
                return call.call_id.to_string();
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("session {id} never parked");
}

async fn a_fork_inside_a_delegation_starts_its_own_child_and_leaves_the_original_alone(
    backend: Backend,
) {
    let (db, registry, scheduler, lead) =
        tree(backend, Arc::new(delegation::model()), delegation::agents()).await;
    let store = db.store.clone();
    say(&registry, lead, "Explain the sky, and write a line.").await;
    let writer = child_session_id(lead, "t2");
    parked_call(&registry, writer).await;
    let writer_journal = store.read(writer, 0, 1000).await.unwrap().len();

    // Fork the lead while its `write` call waits for the writer child.
    let row = store.get_session(lead).await.unwrap();
    let (fork, _) = stead_actors::replay::fork(
        store.as_ref(),
        &row,
        row.last_seq,
        Default::default(),
        "local",
    )
    .await
    .unwrap();
    let forked_writer = child_session_id(fork.id, "t2");
    assert_ne!(forked_writer, writer);
    registry.state(fork.id).await.unwrap();
    let call = parked_call(&registry, forked_writer).await;
    let state = registry.state(fork.id).await.unwrap();
    assert_eq!(state.children["t2"], forked_writer.to_string());
    assert_eq!(state.parent, None);
    let child_row = store.get_session(forked_writer).await.unwrap();
    assert_eq!(child_row.parent.unwrap().session_id, fork.id);
    // The original writer is untouched: same journal, still waiting for its person.
    assert_eq!(
        store.read(writer, 0, 1000).await.unwrap().len(),
        writer_journal
    );

    // Each tree finishes on its own decision.
    let mut fork_frames = registry.subscribe(fork.id).await.unwrap();
    registry.send(forked_writer, approve(call)).await.unwrap();
    wait_for(&mut fork_frames, "turn_finished").await;
    assert_eq!(registry.state(lead).await.unwrap().status(), "running");
    let mut frames = registry.subscribe(lead).await.unwrap();
    let call = parked_call(&registry, writer).await;
    registry.send(writer, approve(call)).await.unwrap();
    wait_for(&mut frames, "turn_finished").await;
    for id in [lead, fork.id] {
        let kinds = journal_kinds(&store, id).await;
        assert_eq!(
            kinds.iter().filter(|k| *k == "tool_call_finished").count(),
            2,
            "{kinds:?}"
        );
    }
    scheduler.abort();
    registry.stop_all();
}

/// The researcher loops on a clock it may call freely; the lead reports what came back.
fn looping() -> (Vec<Agent>, Arc<ScriptedModel>) {
    let mut agents = delegation::agents();
    for agent in &mut agents {
        agent.rules.delegation.max_steps = 3;
        agent.rules.max_steps = 10;
    }
    let researcher = agents.iter_mut().find(|a| a.name == "researcher").unwrap();
    let clock = ClockTool {
        info: ToolInfo {
            name: "clock".into(),
            description: String::new(),
            approval: ApprovalPolicy::Never,
            idempotent: true,
        },
    };
    researcher.rules.tools.insert(
        "clock".into(),
        ToolRules {
            approval: ApprovalPolicy::Never,
            idempotent: true,
            arguments: Default::default(),
            approver: Default::default(),
            builtin: None,
        },
    );
    researcher.tools.insert("clock".into(), Arc::new(clock));
    let model = ScriptedModel::respond(|request| {
        if request.system_prompt == delegation::RESEARCHER_PROMPT {
            return (String::new(), vec![("clock".to_string(), json!({}))]);
        }
        let error = request.transcript.iter().find_map(|e| match e {
            stead_actors::TranscriptEntry::Tool { content, .. } => Some(content["error"].clone()),
            _ => None,
        });
        match error {
            Some(error) => (format!("Gave up: {error}"), vec![]),
            None => (
                String::new(),
                vec![("research".to_string(), json!({"task": "Loop."}))],
            ),
        }
    });
    (agents, Arc::new(model))
}

async fn a_delegation_stops_at_its_step_limit(backend: Backend) {
    let (agents, model) = looping();
    let (db, registry, scheduler, lead) = tree(backend, model, agents).await;
    let store = db.store.clone();
    let mut frames = registry.subscribe(lead).await.unwrap();
    say(&registry, lead, "Loop forever.").await;
    wait_for(&mut frames, "turn_finished").await;

    // The child made its three model calls; the fourth failed with the limit's name.
    let child = child_session_id(lead, "t1");
    let events = store.read(child, 0, 1000).await.unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "model_call_finished")
            .count(),
        3
    );
    let failed = events
        .iter()
        .find(|e| e.kind == "model_call_failed")
        .unwrap();
    let error = failed.payload["error"].as_str().unwrap();
    assert!(error.contains("max_delegation_steps"), "{error}");
    // The lead's call failed with it, and the lead answered.
    let lead_events = store.read(lead, 0, 1000).await.unwrap();
    let call_failed = lead_events
        .iter()
        .find(|e| e.kind == "tool_call_failed")
        .unwrap();
    let reason = call_failed.payload["error"].as_str().unwrap();
    assert!(reason.contains("max_delegation_steps"), "{reason}");
    assert_eq!(
        store
            .get_session(child)
            .await
            .unwrap()
            .parent
            .unwrap()
            .session_id,
        lead
    );
    scheduler.abort();
    registry.stop_all();
}

/// The budget is per top-level *message*, not per child. The lead's one
/// answer starts four looping researchers; with `max_delegation_sessions = 3` the fourth is
/// not started, and the three share `max_delegation_steps = 5` model calls (before: each child
/// had its own 5, so 20, and every child started).
async fn one_messages_fan_out_shares_one_budget_of_calls_and_sessions(backend: Backend) {
    let (mut agents, _) = looping();
    for agent in &mut agents {
        agent.rules.delegation.max_steps = 5;
        agent.rules.delegation.max_sessions = 3;
    }
    let model = ScriptedModel::respond(|request| {
        if request.system_prompt == delegation::RESEARCHER_PROMPT {
            return (String::new(), vec![("clock".to_string(), json!({}))]);
        }
        let answered = request
            .transcript
            .iter()
            .any(|e| matches!(e, stead_actors::TranscriptEntry::Tool { .. }));
        if answered {
            return ("Gave up.".into(), vec![]);
        }
        let research = ("research".to_string(), json!({"task": "Loop."}));
        (String::new(), vec![research; 4])
    });
    let (db, registry, scheduler, lead) = tree(backend, Arc::new(model), agents).await;
    let store = db.store.clone();
    let mut frames = registry.subscribe(lead).await.unwrap();
    say(&registry, lead, "Loop four times over.").await;
    wait_for(&mut frames, "turn_finished").await;

    let mut started = 0;
    let mut model_calls = 0;
    for n in 1..=4 {
        let child = child_session_id(lead, &format!("t{n}"));
        let Ok(events) = store.read(child, 0, 1000).await else {
            continue;
        };
        if events.is_empty() {
            continue;
        }
        started += 1;
        model_calls += events
            .iter()
            .filter(|e| e.kind == "model_call_finished")
            .count();
    }
    assert_eq!(started, 3, "max_delegation_sessions");
    assert_eq!(model_calls, 5, "max_delegation_steps, shared");
    let lead_events = store.read(lead, 0, 1000).await.unwrap();
    let errors: Vec<&str> = lead_events
        .iter()
        .filter(|e| e.kind == "tool_call_failed")
        .filter_map(|e| e.payload["error"].as_str())
        .collect();
    assert_eq!(errors.len(), 4, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("sessions.max_delegation_sessions")),
        "{errors:?}"
    );
    scheduler.abort();
    registry.stop_all();
}

//! The agent's built-in `schedule` tool through the session actor, on SQLite and PostgreSQL:
//! a recurring schedule the model asks for waits for a person's approval, is created by the
//! session itself once approved (the schedule event and the call's result in one append, its
//! due-index row written), and fires into a later turn when the scheduler's clock reaches it.

use chrono::{Duration as Span, Utc};
use stead_actors::schedule_tool::{Builtin, ScheduleTool, ScheduleToolRules};
use stead_persistence::{Backend, ScheduleQuery};
use stead_testkit::db;

use super::schedules::FakeClock;
use super::*;

stead_testkit::both_backends!(the_schedule_tool_under_approval_creates_a_schedule_that_fires);

/// `ops` with a `recurring` schedule tool: cron and interval schedules, always approved first.
fn scheduling_agent() -> Agent {
    let mut agent = agent("http://127.0.0.1:9");
    let rules = ScheduleToolRules {
        ops: vec!["create".into(), "list".into(), "cancel".into()],
        timings: vec!["cron".into(), "every".into()],
    };
    let tool = ScheduleTool {
        info: ToolInfo {
            name: "recurring".into(),
            description: "Schedule a recurring message to yourself".into(),
            approval: ApprovalPolicy::Always,
            idempotent: true,
        },
        rules: rules.clone(),
    };
    agent.rules.tools.insert(
        "recurring".into(),
        ToolRules {
            approval: ApprovalPolicy::Always,
            idempotent: true,
            arguments: stead_actors::ArgumentSchema::compile(&tool.parameters()).unwrap(),
            approver: Default::default(),
            builtin: Some(Builtin::Schedule(rules)),
        },
    );
    agent.tools.insert("recurring".into(), Arc::new(tool));
    agent
}

async fn the_schedule_tool_under_approval_creates_a_schedule_that_fires(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.store.clone();
    let model = ScriptedModel::new(vec![
        (
            "",
            vec![(
                "recurring",
                json!({"op": "create", "key": "standup", "every_secs": 60, "text": "Standup time"}),
            )],
        ),
        ("It is scheduled.", vec![]),
        ("Standup noted.", vec![]),
    ]);
    let registry = SessionRegistry::new(store.clone(), model, vec![scheduling_agent()]);
    let clock = FakeClock::at(Utc::now());
    let scheduler = clock.scheduler(&registry);
    let id = new_session(&store).await;
    let mut frames = registry.subscribe(id).await.unwrap();
    say(&registry, id, "every minute, remind me of the standup").await;
    wait_for(&mut frames, "approval_requested").await;
    assert!(registry.state(id).await.unwrap().schedules.is_empty());
    // The session reads its clock at millisecond precision (`RunBuiltin.now`), so compare
    // against an instant truncated the same way.
    let approved_at = chrono::SubsecRound::trunc_subsecs(Utc::now(), 3);
    let decision = approve("t1");
    registry.send(id, decision).await.unwrap();
    wait_for(&mut frames, "turn_finished").await;
    let kinds = journal_kinds(&store, id).await;
    let at = kinds.iter().position(|k| k == "schedule_created").unwrap();
    assert_eq!(
        kinds[at - 1..at + 3],
        [
            "tool_call_started",
            "schedule_created",
            "tool_call_finished",
            "model_call_started"
        ]
    );
    let state = registry.state(id).await.unwrap();
    let next = state.schedules["standup"].next_due_at.unwrap();
    assert!(next >= approved_at + Span::seconds(60), "{next}");
    let rows = store
        .list_schedules(&ScheduleQuery {
            scope: stead_persistence::Scope::Installation,
            session_id: Some(id),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].next_due_at, next);

    // A minute later the schedule fires into a turn of its own.
    clock.set(next + Span::seconds(1));
    let pass = scheduler.run_due().await.unwrap();
    assert_eq!((pass.due, pass.fired), (1, 1));
    wait_for(&mut frames, "turn_finished").await;
    let journal = store.read(id, 0, 1000).await.unwrap();
    let message = journal
        .iter()
        .rev()
        .find(|e| e.kind == "user_message")
        .unwrap();
    assert_eq!(
        message.payload,
        json!({"text": "Standup time", "client_id": null, "schedule": "standup"})
    );
    registry.stop_all();
}

//! The built-in `schedule` tool as decisions: a call the model makes starts like any tool's,
//! then the session runs it itself (`Input::RunBuiltin`), journaling the schedule event and the
//! call's result together. Creating is idempotent by key, a conflict or a timing the tool does
//! not offer fails back to the model with nothing scheduled, `list` and `cancel` work on the
//! session's schedules, an approval-gated recurring tool parks first, a started call runs again
//! after a restart, and the decision check passes on the journal.

use chrono::{DateTime, Utc};
use serde_json::json;
use stead_actors::schedule_tool::{Builtin, ScheduleTool, ScheduleToolRules};
use stead_actors::tools::Tool;

use super::modes::check;
use super::*;

const NOW: &str = "2026-12-03T10:00:00Z";

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(NOW)
        .unwrap()
        .with_timezone(&Utc)
}

/// The demo session with two schedule tools: `remind_me` makes one-time schedules freely;
/// `recurring` makes cron and interval ones, each after a person's approval.
fn session() -> Session {
    let mut s = Session::new();
    s.agent.max_steps = 20;
    for (name, timings, approval) in [
        ("remind_me", vec!["at", "delay"], ApprovalPolicy::Never),
        ("recurring", vec!["cron", "every"], ApprovalPolicy::Always),
    ] {
        let rules = ScheduleToolRules {
            ops: ScheduleTool::OPS.iter().map(|s| s.to_string()).collect(),
            timings: timings.into_iter().map(String::from).collect(),
        };
        let tool = ScheduleTool {
            info: stead_actors::tools::ToolInfo {
                name: name.into(),
                description: String::new(),
                approval: approval.clone(),
                idempotent: true,
            },
            rules: rules.clone(),
        };
        s.agent.tools.insert(
            name.to_string(),
            ToolRules {
                approval,
                idempotent: true,
                arguments: stead_actors::ArgumentSchema::compile(&tool.parameters()).unwrap(),
                approver: Default::default(),
                builtin: Some(Builtin::Schedule(rules)),
            },
        );
    }
    s
}

/// The model (call `m{n}`) calls `tool` with `arguments`; the started call's id.
fn call(s: &mut Session, model_call: &str, tool: &str, arguments: Value) -> (String, Vec<Action>) {
    let actions = s
        .send(answer(model_call, "", vec![(tool, arguments)]))
        .unwrap();
    let call_id = format!("t{}", s.state.tool_calls_total);
    (call_id, actions)
}

fn run(s: &mut Session, call_id: &str) -> Vec<Action> {
    s.send(Input::RunBuiltin {
        call_id: call_id.into(),
        now: now(),
    })
    .unwrap()
}

/// The last tool result or error in the journal.
fn outcome(s: &Session) -> Result<Value, String> {
    s.journal
        .iter()
        .rev()
        .find_map(|e| match e {
            SessionEvent::ToolCallFinished { result, .. } => Some(Ok(result.clone())),
            SessionEvent::ToolCallFailed { error, .. } => Some(Err(error.clone())),
            _ => None,
        })
        .unwrap()
}

#[test]
fn the_model_creates_lists_and_cancels_its_sessions_schedules() {
    let mut s = session();
    s.send(user("remind me in an hour to stretch")).unwrap();
    let create =
        json!({"op": "create", "key": "stretch", "delay_secs": 3600, "text": "Time to stretch"});
    let (t1, actions) = call(&mut s, "m1", "remind_me", create.clone());
    // It starts as any tool does; the actor turns the action into `RunBuiltin`.
    assert!(matches!(&actions[..], [Action::RunTool { tool, .. }] if tool == "remind_me"));
    let from = s.journal.len();
    let actions = run(&mut s, &t1);
    assert_eq!(
        s.kinds_since(from),
        [
            "schedule_created",
            "tool_call_finished",
            "model_call_started"
        ]
    );
    assert!(matches!(&actions[..], [Action::CallModel { .. }]));
    let result = outcome(&s).unwrap();
    assert_eq!(result["created"], json!(true));
    assert_eq!(result["schedule"]["key"], json!("stretch"));
    assert_eq!(result["schedule"]["kind"], json!("delay"));
    assert_eq!(
        result["schedule"]["next_due_at"],
        json!("2026-12-03T11:00:00Z")
    );
    assert_eq!(
        result["schedule"]["message"],
        json!({"text": "Time to stretch"})
    );
    assert_eq!(
        s.state.schedules["stretch"].next_due_at,
        Some(now() + chrono::Duration::hours(1))
    );

    // The same call again (a model that repeats itself) schedules nothing new.
    let (t2, _) = call(&mut s, "m2", "remind_me", create);
    let from = s.journal.len();
    run(&mut s, &t2);
    assert_eq!(
        s.kinds_since(from),
        ["tool_call_finished", "model_call_started"]
    );
    assert_eq!(outcome(&s).unwrap()["created"], json!(false));

    // Another definition under the key fails back to the model, naming `replace`.
    let other = json!({"op": "create", "key": "stretch", "delay_secs": 60, "text": "Stretch now"});
    let (t3, _) = call(&mut s, "m3", "remind_me", other);
    let from = s.journal.len();
    run(&mut s, &t3);
    assert_eq!(
        s.kinds_since(from),
        ["tool_call_failed", "model_call_started"]
    );
    assert!(outcome(&s).unwrap_err().contains("\"replace\": true"));
    assert_eq!(s.state.schedules.len(), 1);

    let (t4, _) = call(&mut s, "m4", "remind_me", json!({"op": "list"}));
    run(&mut s, &t4);
    let listed = outcome(&s).unwrap();
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 1);
    assert_eq!(listed["schedules"][0]["key"], json!("stretch"));
    assert_eq!(listed["schedules"][0]["status"], json!("pending"));

    let (t5, _) = call(
        &mut s,
        "m5",
        "remind_me",
        json!({"op": "cancel", "key": "stretch"}),
    );
    let from = s.journal.len();
    run(&mut s, &t5);
    assert_eq!(
        s.kinds_since(from),
        [
            "schedule_cancelled",
            "tool_call_finished",
            "model_call_started"
        ]
    );
    assert!(s.state.schedules.is_empty());
    let (t6, _) = call(
        &mut s,
        "m6",
        "remind_me",
        json!({"op": "cancel", "key": "stretch"}),
    );
    run(&mut s, &t6);
    assert!(outcome(&s).unwrap_err().contains("no schedule `stretch`"));
    check(&s);
}

#[test]
fn a_tool_makes_only_the_timings_it_offers_and_recurring_ones_wait_for_approval() {
    let mut s = session();
    s.send(user("every weekday at 9, remind me of the standup"))
        .unwrap();
    let cron = json!({"op": "create", "key": "standup", "cron": "0 9 * * 1-5",
                      "tz": "Europe/Paris", "text": "Standup"});
    // `remind_me` does not even offer `cron` in its schema: the call fails its argument check.
    let (_, actions) = call(&mut s, "m1", "remind_me", cron.clone());
    assert!(actions.iter().all(|a| !matches!(a, Action::RunTool { .. })));
    assert!(outcome(&s).unwrap_err().contains("invalid arguments"));
    assert!(s.state.schedules.is_empty());

    // `recurring` offers it, after approval.
    let from = s.journal.len();
    let (t2, actions) = call(&mut s, "m2", "recurring", cron);
    assert!(actions.is_empty());
    assert_eq!(
        s.kinds_since(from),
        [
            "model_call_finished",
            "tool_call_requested",
            "approval_requested"
        ]
    );
    let actions = s.send(decision(&t2, true, ApprovalScope::Once)).unwrap();
    assert!(matches!(&actions[..], [Action::RunTool { .. }]));
    // The process stops here: recovery runs the started call again.
    let actions = s.send(Input::Recover).unwrap();
    assert!(matches!(&actions[..], [Action::RunTool { call_id, .. }] if *call_id == t2));
    run(&mut s, &t2);
    let result = outcome(&s).unwrap();
    assert_eq!(result["schedule"]["kind"], json!("cron"));
    // Thursday 10:00 UTC is 11:00 in Paris: the next weekday 9:00 there is Friday 08:00 UTC.
    assert_eq!(
        result["schedule"]["next_due_at"],
        json!("2026-12-04T08:00:00Z")
    );

    // A bad definition under an offered timing fails back with the reason.
    let (t3, _) = call(
        &mut s,
        "m3",
        "recurring",
        json!({"op": "create", "key": "x",
        "every_secs": 60, "cron": "* * * * *", "text": "two timings"}),
    );
    s.send(decision(&t3, true, ApprovalScope::Once)).unwrap();
    run(&mut s, &t3);
    assert!(outcome(&s).unwrap_err().contains("exactly one of"));
    let (t4, _) = call(
        &mut s,
        "m4",
        "remind_me",
        json!({"op": "create", "key": "y", "text": "no timing"}),
    );
    run(&mut s, &t4);
    assert!(outcome(&s).unwrap_err().contains("exactly one of"));
    assert_eq!(s.state.schedules.len(), 1);
    check(&s);
}

#[test]
fn run_builtin_is_refused_for_calls_that_are_not_running_builtins() {
    let mut s = session();
    s.send(user("what time is it")).unwrap();
    let (t1, _) = call(&mut s, "m1", "clock", json!({}));
    let before = s.journal.len();
    // An outside tool's call is not the session's to run.
    assert_eq!(
        s.send(Input::RunBuiltin {
            call_id: t1.clone().into(),
            now: now()
        }),
        Err(Refusal::Stale)
    );
    // Nor is a call that is not running.
    assert_eq!(
        s.send(Input::RunBuiltin {
            call_id: "t9".into(),
            now: now()
        }),
        Err(Refusal::Stale)
    );
    assert_eq!(s.journal.len(), before);
}

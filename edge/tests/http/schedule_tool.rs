//! The agent's built-in `schedule` tool in a real session (docs/schedules.md): the model (a
//! scripted double) creates a reminder, the session journals the schedule with the call's
//! result, and the reminder later fires into a turn of its own — seen over REST and the
//! WebSocket like a schedule a client created.

use std::sync::Arc;

use serde_json::{json, Value};
use stead_actors::schedule_tool::{Builtin, ScheduleTool, ScheduleToolRules};
use stead_actors::tools::{Tool, ToolInfo};
use stead_actors::{ApprovalPolicy, ArgumentSchema, ToolRules};
use stead_testkit::app::{ops_agent, App};
use stead_testkit::client::Api;
use stead_testkit::model::ScriptedModel;

/// `ops` with a `remind_me` schedule tool (one-time schedules, no approval).
fn agent() -> stead_actors::session::Agent {
    let mut agent = ops_agent();
    let rules = ScheduleToolRules {
        ops: vec!["create".into(), "list".into(), "cancel".into()],
        timings: vec!["at".into(), "delay".into()],
    };
    let tool = ScheduleTool {
        info: ToolInfo {
            name: "remind_me".into(),
            description: "Schedule a reminder for this conversation".into(),
            approval: ApprovalPolicy::Never,
            idempotent: true,
        },
        rules: rules.clone(),
    };
    agent.rules.tools.insert(
        "remind_me".into(),
        ToolRules {
            approval: ApprovalPolicy::Never,
            idempotent: true,
            arguments: ArgumentSchema::compile(&tool.parameters()).unwrap(),
            approver: Default::default(),
            builtin: Some(Builtin::Schedule(rules)),
        },
    );
    agent.tools.insert("remind_me".into(), Arc::new(tool));
    agent
}

fn kinds(journal: &[Value]) -> Vec<&str> {
    journal.iter().filter_map(|e| e["kind"].as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_schedules_a_reminder_that_fires_into_a_later_turn() {
    let model = ScriptedModel::new(vec![
        (
            "",
            vec![(
                "remind_me",
                json!({"op": "create", "key": "tea", "delay_secs": 1, "text": "The tea is ready"}),
            )],
        ),
        ("I will remind you in a second.", vec![]),
        ("Your tea is ready!", vec![]),
    ]);
    let app = App::start(vec![agent()], model, &[]).await;
    let (id, token) = app.create("ops").await;
    let mut ws = app.ws(&id, &token, "").await;
    ws.send(json!({"type": "user_message", "text": "remind me about the tea in a second"}))
        .await;
    ws.until_event("turn_finished").await;
    let journal = app.journal(&id).await;
    let result = journal
        .iter()
        .find(|e| e["kind"] == "tool_call_finished")
        .unwrap();
    assert_eq!(result["payload"]["result"]["created"], json!(true));
    assert_eq!(result["payload"]["result"]["schedule"]["key"], json!("tea"));

    // The reminder fires into a turn of its own.
    let frames = ws.until_event("turn_finished").await;
    let events = stead_testkit::client::events(&frames);
    assert!(events.iter().any(|e| e["kind"] == "schedule_fired"));
    let journal = app.journal(&id).await;
    assert_eq!(
        kinds(&journal),
        [
            "session_created",
            "user_message",
            "model_call_started",
            "model_call_finished",
            "tool_call_requested",
            "tool_call_started",
            "schedule_created",
            "tool_call_finished",
            "model_call_started",
            "model_call_finished",
            "assistant_message",
            "turn_finished",
            "schedule_fired",
            "user_message",
            "model_call_started",
            "model_call_finished",
            "assistant_message",
            "turn_finished",
        ]
    );
    assert_eq!(
        journal[13]["payload"],
        json!({"text": "The tea is ready", "client_id": null, "schedule": "tea"})
    );
    let (status, list) = app
        .call("GET", &format!("/v1/sessions/{id}/schedules"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(list["schedules"][0]["key"], "tea");
    assert_eq!(list["schedules"][0]["status"], "done");
    assert_eq!(list["schedules"][0]["fired"], 1);
}

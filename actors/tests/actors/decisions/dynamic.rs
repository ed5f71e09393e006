//! Dynamic (MCP) tools and cancellation: the journaled tool list decides which tools exist and
//! what their arguments must be, the most specific rule gives the policy, and a cancel while a
//! tool runs journals `tool_call_cancelled` before `turn_cancelled`.

use serde_json::json;
use stead_actors::{
    decide, Action, AgentRules, ApprovalPolicy, Approver, DynamicToolRule, Input, SeenTool,
    SessionEvent,
};

use super::*;

fn rule(pattern: &str, approval: ApprovalPolicy, idempotent: bool) -> DynamicToolRule {
    DynamicToolRule {
        pattern: pattern.into(),
        approval,
        idempotent,
        approver: Approver::Any,
    }
}

fn seen(name: &str) -> SeenTool {
    SeenTool {
        name: name.into(),
        description: String::new(),
        parameters: json!({
            "type": "object",
            "properties": { "path": { "type": "string" } },
            "required": ["path"]
        }),
    }
}

/// The errors of the session's failed tool calls, in order.
fn failures(s: &Session) -> Vec<String> {
    s.journal
        .iter()
        .filter_map(|e| match e {
            SessionEvent::ToolCallFailed { error, .. } => Some(error.clone()),
            _ => None,
        })
        .collect()
}

fn with_mcp() -> Session {
    let mut s = Session::new();
    s.agent.dynamic = vec![
        rule("files__*", ApprovalPolicy::Never, false),
        rule("files__write_*", ApprovalPolicy::Always, false),
        rule("files__read_file", ApprovalPolicy::Never, true),
    ];
    s
}

fn list(names: &[&str]) -> Input {
    let tools: Vec<SeenTool> = names.iter().map(|n| seen(n)).collect();
    Input::ToolsChanged {
        digest: stead_actors::tools::tools_digest(&tools),
        tools,
    }
}

#[test]
fn the_most_specific_rule_wins() {
    let agent: &AgentRules = &with_mcp().agent;
    let approval = |name: &str| agent.dynamic_rule(name).map(|r| r.approval.clone());
    assert_eq!(approval("files__list"), Some(ApprovalPolicy::Never));
    assert_eq!(approval("files__write_file"), Some(ApprovalPolicy::Always));
    assert!(agent.dynamic_rule("files__read_file").unwrap().idempotent);
    assert!(!agent.dynamic_rule("files__read_files").unwrap().idempotent);
    assert!(agent.dynamic_rule("other__read_file").is_none());
    assert!(stead_actors::rules::glob_matches("a?c*", "abcdef"));
    assert!(!stead_actors::rules::glob_matches("a?c", "abcd"));
    assert!(stead_actors::rules::glob_matches("*", ""));
}

#[test]
fn the_journaled_list_decides_which_tools_exist_and_their_arguments() {
    let mut s = with_mcp();
    s.send(user("hi")).unwrap();
    s.send(list(&["files__read_file", "files__write_file"]))
        .unwrap();
    assert!(matches!(
        s.journal.last(),
        Some(SessionEvent::ToolsSeen { tools, .. }) if tools.len() == 2
    ));
    // The same list again is nothing new.
    assert!(s
        .send(list(&["files__read_file", "files__write_file"]))
        .is_err());
    let from = s.journal.len();
    let actions = s
        .send(answer(
            "m1",
            "",
            vec![
                ("files__read_file", json!({ "path": "/a" })),
                ("files__write_file", json!({ "path": "/b" })),
                ("files__gone", json!({})),
                ("files__read_file", json!({ "path": 7 })),
            ],
        ))
        .unwrap();
    assert_eq!(
        s.kinds_since(from),
        [
            "model_call_finished",
            "tool_call_requested",
            "tool_call_requested",
            "tool_call_requested",
            "tool_call_requested",
            "tool_call_started"
        ]
    );
    assert!(matches!(&actions[..], [Action::RunTool { tool, .. }] if tool == "files__read_file"));
    s.send(Input::ToolFinished {
        call_id: "t1".into(),
        result: json!({ "content": [] }),
    })
    .unwrap();
    // The write parks on approval (the more specific rule); the unknown and the invalid call
    // fail back to the model without running.
    let errors = failures(&s);
    assert!(s.journal.iter().any(
        |e| matches!(e, SessionEvent::ApprovalRequested { tool, .. } if tool == "files__write_file")
    ));
    s.send(decision("t2", false, ApprovalScope::Once)).unwrap();
    let errors_after = failures(&s);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].contains("unknown tool `files__gone`"),
        "{errors:?}"
    );
    assert!(errors[1].contains("invalid arguments"), "{errors:?}");
    assert_eq!(errors_after.len(), 3, "{errors_after:?}");
    assert!(
        errors_after[2].contains("rejected by ada"),
        "{errors_after:?}"
    );
    assert_eq!(
        s.replayed(),
        s.state,
        "the fold of the journal is the state"
    );
}

#[test]
fn recovery_follows_the_dynamic_rule_for_idempotency() {
    let mut s = with_mcp();
    s.send(user("hi")).unwrap();
    s.send(list(&["files__read_file", "files__list"])).unwrap();
    s.send(answer(
        "m1",
        "",
        vec![("files__read_file", json!({ "path": "/a" }))],
    ))
    .unwrap();
    let actions = s.send(Input::Recover).unwrap();
    assert!(matches!(&actions[..], [Action::RunTool { tool, .. }] if tool == "files__read_file"));
    s.send(Input::ToolFinished {
        call_id: "t1".into(),
        result: json!({}),
    })
    .unwrap();
    s.send(answer(
        "m2",
        "",
        vec![("files__list", json!({ "path": "/" }))],
    ))
    .unwrap();
    let from = s.journal.len();
    s.send(Input::Recover).unwrap();
    assert_eq!(
        s.kinds_since(from),
        ["tool_call_failed", "model_call_started"]
    );
    assert!(matches!(
        &s.journal[from],
        SessionEvent::ToolCallFailed { in_doubt: true, tool, .. } if tool == "files__list"
    ));
}

#[test]
fn a_cancel_while_a_tool_runs_journals_the_call_as_cancelled() {
    let mut s = Session::new();
    s.send(user("what time is it")).unwrap();
    s.send(answer("m1", "", vec![("clock", json!({}))]))
        .unwrap();
    let from = s.journal.len();
    let actions = s
        .send(Input::Cancel {
            reason: "cancelled by ada".into(),
        })
        .unwrap();
    assert_eq!(
        s.kinds_since(from),
        ["tool_call_cancelled", "turn_cancelled"]
    );
    assert_eq!(
        actions,
        [Action::AbortTool {
            call_id: "t1".into()
        }]
    );
    // The late answer is dropped; the transcript answers the call with the cancel.
    assert!(s
        .send(Input::ToolFinished {
            call_id: "t1".into(),
            result: json!({}),
        })
        .is_err());
    assert!(s.state.transcript.iter().any(|entry| matches!(
        entry,
        stead_actors::TranscriptEntry::Tool { content, .. }
            if content["error"] == "cancelled: cancelled by ada"
    )));
    // Closing with a tool running cancels it the same way.
    s.send(user("again")).unwrap();
    s.send(answer("m2", "", vec![("clock", json!({}))]))
        .unwrap();
    let from = s.journal.len();
    s.send(Input::Close {
        reason: "closed by ada".into(),
    })
    .unwrap();
    assert_eq!(
        s.kinds_since(from),
        ["tool_call_cancelled", "session_closed"]
    );
    assert!(decide(&s.state, "s1", user("more"), &s.agent).is_err());
}

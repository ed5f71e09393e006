//! Turns: the model and tool steps, approvals (once, for the session, by condition), queued
//! messages, repeated client ids, the step limit and cancel.

use super::*;

#[test]
fn a_plain_turn_calls_the_model_once_and_finishes() {
    let mut s = Session::new();
    let actions = s.send(user("hello")).unwrap();
    assert_eq!(
        actions,
        vec![Action::CallModel {
            call_id: "m1".into()
        }]
    );
    assert_eq!(s.state.status(), "running");
    let actions = s.send(answer("m1", "Hi there", vec![])).unwrap();
    assert!(actions.is_empty());
    assert_eq!(
        s.kinds_since(1),
        [
            "user_message",
            "model_call_started",
            "model_call_finished",
            "assistant_message",
            "turn_finished"
        ]
    );
    assert_eq!(s.state.status(), "idle");
    assert_eq!(s.state.usage.completion_tokens, 5);
    assert_eq!(s.replayed(), s.state, "replay rebuilds the same state");
}

#[test]
fn a_safe_tool_runs_then_the_model_answers() {
    let mut s = Session::new();
    s.send(user("what time is it?")).unwrap();
    let actions = s
        .send(answer("m1", "", vec![("clock", json!({}))]))
        .unwrap();
    assert_eq!(
        actions,
        vec![Action::RunTool {
            call_id: "t1".into(),
            tool: "clock".into(),
            arguments: json!({}),
            idempotency_key: "s1:t1".into(),
        }]
    );
    let actions = s
        .send(Input::ToolFinished {
            call_id: "t1".into(),
            result: json!("12:00"),
        })
        .unwrap();
    assert_eq!(
        actions,
        vec![Action::CallModel {
            call_id: "m2".into()
        }]
    );
    s.send(answer("m2", "It is noon.", vec![])).unwrap();
    assert_eq!(s.state.status(), "idle");
    assert_eq!(s.replayed(), s.state);
}

#[test]
fn a_gated_tool_parks_until_approved_and_runs_once() {
    let mut s = Session::new();
    s.send(user("clean the users table")).unwrap();
    let actions = s
        .send(answer(
            "m1",
            "",
            vec![("delete_records", json!({"table": "users"}))],
        ))
        .unwrap();
    assert!(actions.is_empty(), "parked: nothing runs");
    assert_eq!(s.state.status(), "awaiting_approval");
    let SessionEvent::ApprovalRequested {
        args_hash, reason, ..
    } = s.journal.last().unwrap().clone()
    else {
        panic!("expected approval_requested");
    };
    assert_eq!(
        args_hash,
        stead_actors::args_hash(&json!({"table": "users"}))
    );
    assert!(!reason.is_empty());

    // Parked state survives replay.
    assert_eq!(s.replayed().status(), "awaiting_approval");
    assert_eq!(
        decide(&s.replayed(), "s1", Input::Recover, &s.agent)
            .unwrap()
            .actions,
        vec![]
    );

    // A decision bound to other arguments is refused.
    let wrong = Input::Decision {
        call_id: "t1".into(),
        approved: true,
        reason: None,
        decided_by: "ada".into(),
        scope: ApprovalScope::Once,
        args_hash: Some("0".repeat(64)),
        overspend_usd: None,
        may_spend: true,
    };
    assert_eq!(s.send(wrong), Err(Refusal::ArgsHashMismatch));

    let approve = Input::Decision {
        call_id: "t1".into(),
        approved: true,
        reason: None,
        decided_by: "ada".into(),
        scope: ApprovalScope::Once,
        args_hash: Some(args_hash),
        overspend_usd: None,
        may_spend: true,
    };
    let actions = s.send(approve.clone()).unwrap();
    assert!(
        matches!(&actions[..], [Action::RunTool { idempotency_key, .. }] if idempotency_key == "s1:t1")
    );
    // Decided once: a second decision is a conflict.
    assert_eq!(s.send(approve), Err(Refusal::AlreadyDecided));
    assert_eq!(
        s.send(decision("t9", true, ApprovalScope::Once)),
        Err(Refusal::NoSuchApproval)
    );
}

#[test]
fn a_rejection_goes_back_to_the_model_as_the_tools_error() {
    let mut s = Session::new();
    s.send(user("clean up")).unwrap();
    s.send(answer(
        "m1",
        "",
        vec![("delete_records", json!({"table": "logs"}))],
    ))
    .unwrap();
    let actions = s
        .send(Input::Decision {
            call_id: "t1".into(),
            approved: false,
            reason: Some("not today".into()),
            decided_by: "ada".into(),
            scope: ApprovalScope::Once,
            args_hash: None,
            overspend_usd: None,
            may_spend: true,
        })
        .unwrap();
    assert_eq!(
        actions,
        vec![Action::CallModel {
            call_id: "m2".into()
        }]
    );
    let failed = s
        .journal
        .iter()
        .find_map(|e| match e {
            SessionEvent::ToolCallFailed { error, .. } => Some(error.clone()),
            _ => None,
        })
        .unwrap();
    assert!(failed.contains("rejected by ada") && failed.contains("not today"));
}

#[test]
fn approval_for_the_session_covers_later_calls_of_that_tool() {
    let mut s = Session::new();
    s.send(user("clean up twice")).unwrap();
    s.send(answer(
        "m1",
        "",
        vec![("delete_records", json!({"table": "a"}))],
    ))
    .unwrap();
    s.send(decision("t1", true, ApprovalScope::Session))
        .unwrap();
    s.send(Input::ToolFinished {
        call_id: "t1".into(),
        result: json!({"deleted": 3}),
    })
    .unwrap();
    let actions = s
        .send(answer(
            "m2",
            "",
            vec![("delete_records", json!({"table": "b"}))],
        ))
        .unwrap();
    assert!(
        matches!(&actions[..], [Action::RunTool { call_id, .. }] if call_id == "t2"),
        "{actions:?}"
    );
}

#[test]
fn conditional_policies_look_at_the_arguments() {
    let mut s = Session::new();
    s.send(user("drop logs")).unwrap();
    let actions = s
        .send(answer(
            "m1",
            "",
            vec![("drop_table", json!({"table": "logs"}))],
        ))
        .unwrap();
    assert!(matches!(&actions[..], [Action::RunTool { .. }]));
    s.send(Input::ToolFinished {
        call_id: "t1".into(),
        result: json!("ok"),
    })
    .unwrap();
    let actions = s
        .send(answer(
            "m2",
            "",
            vec![("drop_table", json!({"table": "users"}))],
        ))
        .unwrap();
    assert!(actions.is_empty());
    assert_eq!(s.state.status(), "awaiting_approval");
}

#[test]
fn messages_during_a_turn_wait_for_it() {
    let mut s = Session::new();
    s.send(user("first")).unwrap();
    let actions = s.send(user("second")).unwrap();
    assert!(
        actions.is_empty(),
        "no second model call while the first turn runs"
    );
    assert_eq!(s.state.queued.len(), 1);
    let actions = s.send(answer("m1", "one", vec![])).unwrap();
    assert_eq!(
        actions,
        vec![Action::CallModel {
            call_id: "m2".into()
        }],
        "the queued message starts the next turn"
    );
    assert!(s.state.queued.is_empty());
    assert_eq!(s.replayed(), s.state);
}

#[test]
fn repeated_client_ids_are_applied_once() {
    let mut s = Session::new();
    let first = Input::UserMessage {
        text: "hi".into(),
        client_id: Some("c-1".into()),
        mode: None,
        attachments: Vec::new(),
    };
    s.send(first.clone()).unwrap();
    assert_eq!(s.send(first), Err(Refusal::DuplicateClientId));
}

#[test]
fn max_steps_bounds_a_turn() {
    let mut s = Session::new();
    s.send(user("loop")).unwrap();
    for step in 1..=4 {
        let call = format!("m{step}");
        let actions = s
            .send(answer(&call, "", vec![("clock", json!({}))]))
            .unwrap();
        let Action::RunTool { call_id, .. } = &actions[0] else {
            panic!("{actions:?}")
        };
        let actions = s
            .send(Input::ToolFinished {
                call_id: call_id.clone(),
                result: json!(1),
            })
            .unwrap();
        if step < 4 {
            assert_eq!(
                actions,
                vec![Action::CallModel {
                    call_id: format!("m{}", step + 1).into()
                }]
            );
        } else {
            assert!(actions.is_empty());
        }
    }
    assert!(
        matches!(s.journal.last(), Some(SessionEvent::TurnFinished { reason }) if reason == "max_steps")
    );
}

#[test]
fn cancel_aborts_the_model_call_and_ends_the_turn() {
    let mut s = Session::new();
    s.send(user("long task")).unwrap();
    let actions = s
        .send(Input::Cancel {
            reason: "user".into(),
        })
        .unwrap();
    assert_eq!(
        actions,
        vec![Action::AbortModelCall {
            call_id: "m1".into()
        }]
    );
    assert_eq!(s.state.status(), "idle");
    // The late answer of the aborted call is refused, not journaled.
    assert_eq!(s.send(answer("m1", "late", vec![])), Err(Refusal::Stale));
    assert_eq!(
        s.send(Input::Cancel {
            reason: "again".into()
        }),
        Err(Refusal::NothingToCancel)
    );
}

#[test]
fn arguments_that_break_the_tools_schema_fail_back_to_the_model_before_any_approval() {
    let mut s = Session::new();
    s.send(user("pay bob")).unwrap();
    let from = s.journal.len();
    // Missing `to`, a string amount, and text that is not JSON at all (kept as a string).
    let actions = s
        .send(answer(
            "m1",
            "",
            vec![
                ("pay", json!({ "amount": 10 })),
                ("pay", json!({ "amount": "5000", "to": "bob" })),
                ("pay", json!("{amount: 10")),
            ],
        ))
        .unwrap();
    assert_eq!(
        s.kinds_since(from),
        vec![
            "model_call_finished",
            "tool_call_requested",
            "tool_call_requested",
            "tool_call_requested",
            "tool_call_failed",
            "tool_call_failed",
            "tool_call_failed",
            "model_call_started",
        ]
    );
    let errors: Vec<String> = s.journal[from..]
        .iter()
        .filter_map(|e| match e {
            SessionEvent::ToolCallFailed { error, .. } => Some(error.clone()),
            _ => None,
        })
        .collect();
    assert!(
        errors[0].starts_with("invalid arguments: ") && errors[0].contains("to"),
        "{errors:?}"
    );
    assert!(errors[1].contains("/amount"), "{errors:?}");
    assert!(errors[2].contains("not a JSON object"), "{errors:?}");
    // Nothing parked, nothing ran: the model is asked again with the errors.
    assert_eq!(
        actions,
        vec![Action::CallModel {
            call_id: "m2".into()
        }]
    );
}

#[test]
fn an_operator_only_tool_cannot_be_approved_with_a_session_token() {
    let mut s = Session::new();
    s.send(user("pay bob")).unwrap();
    s.send(answer(
        "m1",
        "",
        vec![("pay", json!({ "amount": 10, "to": "bob" }))],
    ))
    .unwrap();
    let by = |who: &str, approved: bool, scope: ApprovalScope| Input::Decision {
        call_id: "t1".into(),
        approved,
        reason: None,
        decided_by: who.into(),
        scope,
        args_hash: None,
        overspend_usd: None,
        may_spend: true,
    };
    let parked = s.journal.len();
    for scope in [ApprovalScope::Once, ApprovalScope::Session] {
        assert_eq!(
            s.send(by("session_token:0190", true, scope)),
            Err(Refusal::OperatorRequired)
        );
    }
    assert_eq!(
        s.journal.len(),
        parked,
        "a refused approval journals nothing"
    );
    // An operator may approve it.
    let actions = s
        .send(by("api_key:1a2b3c4d", true, ApprovalScope::Once))
        .unwrap();
    assert!(matches!(actions[0], Action::RunTool { .. }), "{actions:?}");

    // A session token's holder may still reject one.
    let mut s = Session::new();
    s.send(user("pay bob")).unwrap();
    s.send(answer(
        "m1",
        "",
        vec![("pay", json!({ "amount": 10, "to": "bob" }))],
    ))
    .unwrap();
    s.send(by("session_token:0190", false, ApprovalScope::Once))
        .unwrap();
    assert!(matches!(
        s.journal.last(),
        Some(SessionEvent::ModelCallStarted { .. })
    ));
}

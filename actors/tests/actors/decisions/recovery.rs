//! Recovery after a restart, refused and late inputs, expired approvals, and sessions that
//! failed or were closed.

use super::*;

#[test]
fn recovery_reissues_an_unfinished_model_call() {
    let mut s = Session::new();
    s.send(user("hi")).unwrap();
    let recovered = decide(&s.replayed(), "s1", Input::Recover, &s.agent).unwrap();
    assert!(recovered.events.is_empty(), "no duplicate events");
    assert_eq!(
        recovered.actions,
        vec![Action::CallModel {
            call_id: "m1".into()
        }]
    );
}

#[test]
fn recovery_reruns_an_idempotent_tool_with_the_same_key() {
    let mut s = Session::new();
    s.send(user("time?")).unwrap();
    s.send(answer("m1", "", vec![("clock", json!({}))]))
        .unwrap();
    let recovered = decide(&s.replayed(), "s1", Input::Recover, &s.agent).unwrap();
    assert!(recovered.events.is_empty());
    assert!(
        matches!(&recovered.actions[..], [Action::RunTool { idempotency_key, .. }] if idempotency_key == "s1:t1")
    );
}

#[test]
fn recovery_marks_a_non_idempotent_tool_in_doubt_and_never_reruns_it() {
    let mut s = Session::new();
    s.send(user("pay")).unwrap();
    s.send(answer(
        "m1",
        "",
        vec![("charge_card", json!({"cents": 500}))],
    ))
    .unwrap();
    let state = s.replayed();
    let recovered = decide(&state, "s1", Input::Recover, &s.agent).unwrap();
    assert!(recovered
        .actions
        .iter()
        .all(|a| !matches!(a, Action::RunTool { .. })));
    assert!(matches!(
        &recovered.events[0],
        SessionEvent::ToolCallFailed { in_doubt: true, call_id, .. } if call_id == "t1"
    ));
    // The model hears about it and answers.
    assert_eq!(
        recovered.actions,
        vec![Action::CallModel {
            call_id: "m2".into()
        }]
    );
    // Folded, the model's next call sees the call as an error that says it is in doubt.
    let mut folded = state.clone();
    let mut seq = folded.last_seq;
    for event in &recovered.events[..1] {
        seq += 1;
        folded.apply(seq, event);
    }
    let call = folded.turn.as_ref().unwrap().call("t1").unwrap().clone();
    assert_eq!(call.status, CallStatus::Failed { in_doubt: true });
    s.commit(recovered.events);
    assert!(matches!(
        s.state.transcript.last(),
        Some(stead_actors::TranscriptEntry::Tool { content, .. }) if content["error"].as_str().unwrap().starts_with("in doubt")
    ));
}

#[test]
fn unknown_tools_fail_without_running() {
    let mut s = Session::new();
    s.send(user("x")).unwrap();
    let actions = s
        .send(answer("m1", "", vec![("rm_rf", json!({}))]))
        .unwrap();
    assert_eq!(
        actions,
        vec![Action::CallModel {
            call_id: "m2".into()
        }]
    );
    assert!(s.kinds_since(1).contains(&"tool_call_failed".to_string()));
}

#[test]
fn late_or_foreign_results_are_refused() {
    let mut s = Session::new();
    s.send(user("x")).unwrap();
    assert_eq!(s.send(answer("m7", "?", vec![])), Err(Refusal::Stale));
    assert_eq!(
        s.send(Input::ToolFinished {
            call_id: "t1".into(),
            result: json!(1)
        }),
        Err(Refusal::Stale)
    );
}

#[test]
fn an_expired_approval_is_rejected_and_a_late_decision_refused() {
    let mut s = Session::new();
    s.send(user("clean up")).unwrap();
    s.send(answer(
        "m1",
        "",
        vec![("delete_records", json!({"table": "logs"}))],
    ))
    .unwrap();
    let actions = s
        .send(Input::ApprovalExpired {
            call_id: "t1".into(),
        })
        .unwrap();
    assert_eq!(
        actions,
        vec![Action::CallModel {
            call_id: "m2".into()
        }],
        "the model hears the expiry"
    );
    assert!(s.journal.iter().any(|e| matches!(
        e,
        SessionEvent::ApprovalDecided { approved: false, reason: Some(r), decided_by, .. } if r == "expired" && decided_by == "stead"
    )));
    let late = decision("t1", true, ApprovalScope::Once);
    assert_eq!(s.send(late), Err(Refusal::AlreadyDecided));
    // An expiry after a decision is refused too (the decision won).
    assert_eq!(
        s.send(Input::ApprovalExpired {
            call_id: "t1".into()
        }),
        Err(Refusal::AlreadyDecided)
    );
}

#[test]
fn a_failed_session_takes_no_input_and_resumes_nothing() {
    let mut s = Session::new();
    s.send(user("hi")).unwrap();
    let actions = s
        .send(Input::Fail {
            reason: "the actor kept crashing".into(),
        })
        .unwrap();
    assert_eq!(
        actions,
        vec![Action::AbortModelCall {
            call_id: "m1".into()
        }]
    );
    assert_eq!(s.kinds_since(s.journal.len() - 1), vec!["session_failed"]);
    let replayed = s.replayed();
    assert_eq!(replayed.status(), "failed");
    assert_eq!(replayed.failed.as_deref(), Some("the actor kept crashing"));
    assert_eq!(replayed, s.state);
    let recovered = decide(&replayed, "s1", Input::Recover, &s.agent).unwrap();
    assert_eq!(recovered, Default::default(), "nothing is resumed");
    let journaled = s.journal.len();
    for input in [
        user("again"),
        answer("m1", "late", vec![]),
        Input::Cancel {
            reason: "user".into(),
        },
    ] {
        assert_eq!(s.send(input), Err(Refusal::Ended));
    }
    assert_eq!(s.journal.len(), journaled);
    // A failed session can still be closed, once.
    s.send(Input::Close {
        reason: "user".into(),
    })
    .unwrap();
    assert_eq!(s.state.status(), "closed");
    assert_eq!(
        s.send(Input::Close {
            reason: "again".into()
        }),
        Err(Refusal::Ended)
    );
}

#[test]
fn closing_stops_the_turn_and_drops_queued_messages() {
    let mut s = Session::new();
    s.send(user("first")).unwrap();
    s.send(user("queued")).unwrap();
    let actions = s
        .send(Input::Close {
            reason: "user".into(),
        })
        .unwrap();
    assert_eq!(
        actions,
        vec![Action::AbortModelCall {
            call_id: "m1".into()
        }]
    );
    assert_eq!(s.state.status(), "closed");
    assert!(s.state.queued.is_empty() && s.state.turn.is_none());
    assert_eq!(s.send(user("after")), Err(Refusal::Ended));
    assert_eq!(s.replayed(), s.state);
}

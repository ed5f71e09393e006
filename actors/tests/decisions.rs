//! The agent loop's decisions and the fold, with no database, model or tool: each test drives
//! a session through inputs and checks the journaled events and the actions.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use stead_actors::{
    decide, Action, AgentRules, ApprovalPolicy, ApprovalScope, CallStatus, Input, ModelOutput,
    Refusal, SessionEvent, SessionState, ToolRules,
};

struct Session {
    state: SessionState,
    journal: Vec<SessionEvent>,
    agent: AgentRules,
}

impl Session {
    fn new() -> Self {
        let mut tools = BTreeMap::new();
        tools.insert(
            "clock".to_string(),
            ToolRules {
                approval: ApprovalPolicy::Never,
                idempotent: true,
            },
        );
        tools.insert(
            "delete_records".to_string(),
            ToolRules {
                approval: ApprovalPolicy::Always,
                idempotent: true,
            },
        );
        tools.insert(
            "charge_card".to_string(),
            ToolRules {
                approval: ApprovalPolicy::Never,
                idempotent: false,
            },
        );
        tools.insert(
            "drop_table".to_string(),
            ToolRules {
                approval: ApprovalPolicy::parse(r#"table == "users""#).unwrap(),
                idempotent: true,
            },
        );
        let mut s = Session {
            state: SessionState::default(),
            journal: Vec::new(),
            agent: AgentRules {
                route: "default".into(),
                max_steps: 4,
                tools,
                approval_timeout: None,
            },
        };
        s.commit(vec![SessionEvent::SessionCreated {
            agent: "ops".into(),
        }]);
        s
    }

    fn commit(&mut self, events: Vec<SessionEvent>) {
        for event in events {
            let seq = self.state.last_seq + 1;
            self.state.apply(seq, &event);
            self.journal.push(event);
        }
    }

    /// Decides, commits the events, returns the actions.
    fn send(&mut self, input: Input) -> Result<Vec<Action>, Refusal> {
        let decision = decide(&self.state, "s1", input, &self.agent)?;
        self.commit(decision.events);
        Ok(decision.actions)
    }

    fn kinds_since(&self, from: usize) -> Vec<String> {
        self.journal[from..]
            .iter()
            .map(|e| e.to_parts().0)
            .collect()
    }

    /// Replays the whole journal into a fresh state (what activation does).
    fn replayed(&self) -> SessionState {
        let mut state = SessionState::default();
        for (i, event) in self.journal.iter().enumerate() {
            state.apply(i as i64 + 1, event);
        }
        state
    }
}

/// Ada's decision on a call, not bound to an argument hash.
fn decision(call_id: &str, approved: bool, scope: ApprovalScope) -> Input {
    Input::Decision {
        call_id: call_id.into(),
        approved,
        reason: None,
        decided_by: "ada".into(),
        scope,
        args_hash: None,
    }
}

fn user(text: &str) -> Input {
    Input::UserMessage {
        text: text.into(),
        client_id: None,
    }
}

fn answer(call_id: &str, text: &str, calls: Vec<(&str, Value)>) -> Input {
    Input::ModelFinished {
        call_id: call_id.into(),
        output: ModelOutput {
            text: text.into(),
            tool_calls: calls.into_iter().map(|(t, a)| (t.to_string(), a)).collect(),
            usage: stead_actors::Usage {
                prompt_tokens: 10,
                completion_tokens: 5,
            },
            provider: "double".into(),
            model: "scripted".into(),
            latency_ms: 1.0,
            ttft_ms: 0.5,
            cost: 0.0,
        },
    }
}

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
    };
    assert_eq!(s.send(wrong), Err(Refusal::ArgsHashMismatch));

    let approve = Input::Decision {
        call_id: "t1".into(),
        approved: true,
        reason: None,
        decided_by: "ada".into(),
        scope: ApprovalScope::Once,
        args_hash: Some(args_hash),
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
                    call_id: format!("m{}", step + 1)
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

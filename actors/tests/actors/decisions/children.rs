//! Delegation limits as decisions: an `agent` tool call of a session at the configured depth
//! fails back to the model before anything starts; one level up it starts.

use stead_actors::events::ParentRef;
use stead_actors::schedule_tool::Builtin;

use super::*;

fn delegating(depth: u32) -> Session {
    let mut s = Session::new();
    s.agent.delegation.max_depth = 2;
    s.agent.tools.insert(
        "research".into(),
        ToolRules {
            approval: ApprovalPolicy::Never,
            idempotent: true,
            arguments: Default::default(),
            approver: Default::default(),
            builtin: Some(Builtin::Agent {
                agent: "researcher".into(),
            }),
        },
    );
    if depth > 0 {
        s.state.parent = Some(ParentRef {
            session_id: "parent".into(),
            call_id: "t1".into(),
            depth,
            delegation: None,
            message: None,
        });
    }
    s
}

#[test]
fn a_session_at_the_depth_limit_cannot_delegate() {
    let mut deep = delegating(2);
    deep.send(user("dig deeper")).unwrap();
    let from = deep.journal.len();
    let actions = deep
        .send(answer(
            "m1",
            "",
            vec![("research", json!({"task": "more"}))],
        ))
        .unwrap();
    assert!(actions.iter().all(|a| !matches!(a, Action::RunTool { .. })));
    assert_eq!(
        deep.kinds_since(from),
        [
            "model_call_finished",
            "tool_call_requested",
            "tool_call_failed",
            "model_call_started"
        ]
    );
    let (_, failed) = deep.journal[from + 2].to_parts();
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("2 delegations deep"),
        "{failed}"
    );

    let mut child = delegating(1);
    child.send(user("dig")).unwrap();
    let actions = child
        .send(answer(
            "m1",
            "",
            vec![("research", json!({"task": "more"}))],
        ))
        .unwrap();
    assert!(matches!(&actions[..], [Action::RunTool { tool, .. }] if tool == "research"));
}

/// A second agent tool, `write`, that needs approval.
fn with_writer(mut s: Session) -> Session {
    s.agent.tools.insert(
        "write".into(),
        ToolRules {
            approval: ApprovalPolicy::Always,
            idempotent: true,
            arguments: Default::default(),
            approver: Default::default(),
            builtin: Some(Builtin::Agent {
                agent: "writer".into(),
            }),
        },
    );
    s
}

fn run_tool_ids(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::RunTool { call_id, .. } => Some(call_id.to_string()),
            _ => None,
        })
        .collect()
}

fn done(call_id: &str, result: Value) -> Input {
    Input::ToolFinished {
        call_id: call_id.into(),
        result,
    }
}

#[test]
fn agent_calls_and_idempotent_never_approval_calls_of_one_answer_start_together() {
    let mut s = delegating(0);
    s.send(user("research two things and tell the time"))
        .unwrap();
    let actions = s
        .send(answer(
            "m1",
            "",
            vec![
                ("research", json!({"task": "a"})),
                ("research", json!({"task": "b"})),
                ("clock", json!({})),
                ("charge_card", json!({"amount": 1})),
            ],
        ))
        .unwrap();
    // The two agent calls and the clock start at once; the non-idempotent charge waits.
    assert_eq!(run_tool_ids(&actions), ["t1", "t2", "t3"]);
    let turn = s.state.turn.clone().unwrap();
    assert_eq!(turn.calls[3].status, CallStatus::Requested);

    // Results arrive in any order and are journaled as they come; the charge starts once
    // nothing else runs, and the model is asked again only after every call has its result.
    assert!(run_tool_ids(&s.send(done("t2", json!("b found"))).unwrap()).is_empty());
    assert!(run_tool_ids(&s.send(done("t3", json!("noon"))).unwrap()).is_empty());
    let actions = s.send(done("t1", json!("a found"))).unwrap();
    assert_eq!(run_tool_ids(&actions), ["t4"]);
    let actions = s.send(done("t4", json!("charged"))).unwrap();
    assert!(matches!(&actions[..], [Action::CallModel { call_id }] if call_id == "m2"));
    // The transcript holds every result, in the order they finished.
    let results: Vec<String> = s
        .state
        .transcript
        .iter()
        .filter_map(|e| match e {
            stead_actors::TranscriptEntry::Tool { call_id, .. } => Some(call_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(results, ["t2", "t3", "t1", "t4"]);
    // Folding the journal again gives the same state (the decision check's premise).
    assert_eq!(s.replayed(), s.state);
}

#[test]
fn an_agent_call_waiting_for_approval_parks_beside_a_running_one() {
    let mut s = with_writer(delegating(0));
    s.send(user("research, then write")).unwrap();
    let actions = s
        .send(answer(
            "m1",
            "",
            vec![
                ("research", json!({"task": "a"})),
                ("write", json!({"task": "b"})),
            ],
        ))
        .unwrap();
    assert_eq!(run_tool_ids(&actions), ["t1"]);
    assert_eq!(
        s.state.status(),
        stead_persistence::SessionStatus::AwaitingApproval
    );
    // The research child finishes while the writer waits for its person: nothing else starts.
    let actions = s.send(done("t1", json!("a found"))).unwrap();
    assert!(actions.is_empty(), "{actions:?}");
    let actions = s.send(decision("t2", true, ApprovalScope::Once)).unwrap();
    assert_eq!(run_tool_ids(&actions), ["t2"]);
}

#[test]
fn agent_calls_beyond_the_fanout_limit_fail_back_to_the_model() {
    let mut s = delegating(0);
    s.agent.delegation.max_fanout = 2;
    s.send(user("research three things")).unwrap();
    let from = s.journal.len();
    let actions = s
        .send(answer(
            "m1",
            "",
            vec![
                ("research", json!({"task": "a"})),
                ("research", json!({"task": "b"})),
                ("research", json!({"task": "c"})),
            ],
        ))
        .unwrap();
    assert_eq!(run_tool_ids(&actions), ["t1", "t2"]);
    let failed = s.journal[from..]
        .iter()
        .find_map(|e| match e {
            SessionEvent::ToolCallFailed { call_id, error, .. } => {
                Some((call_id.clone(), error.clone()))
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(failed.0, "t3");
    assert!(failed.1.contains("max_delegation_fanout"), "{}", failed.1);
}

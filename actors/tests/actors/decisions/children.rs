//! Delegation limits as decisions: an `agent` tool call of a session at the configured depth
//! fails back to the model before anything starts; one level up it starts.

use stead_actors::events::ParentRef;
use stead_actors::schedule_tool::Builtin;

use super::*;

fn delegating(depth: u32) -> Session {
    let mut s = Session::new();
    s.agent.max_depth = 2;
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

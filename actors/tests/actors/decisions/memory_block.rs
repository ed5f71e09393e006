//! The pinned memory block (docs/sessions.md, "Memory block"): a `memory_block` tool call runs
//! inside its decision like the schedule tool — `memory_updated` and the call's result are
//! journaled together, a failed operation fails back to the model with the block unchanged, an
//! approval policy applies to it like to any tool, and the block survives a compaction (it is
//! not in the transcript). Replay and the decision check rebuild it.

use chrono::{DateTime, Utc};
use stead_actors::schedule_tool::Builtin;

use super::modes::check;
use super::*;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-05T10:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn session(approval: ApprovalPolicy) -> Session {
    session_offering(approval, &stead_actors::memory_block::OPS)
}

fn session_offering(approval: ApprovalPolicy, ops: &[&str]) -> Session {
    let mut s = Session::new();
    s.agent.tools.insert(
        "memory".to_string(),
        ToolRules {
            approval,
            idempotent: true,
            arguments: Default::default(),
            approver: Default::default(),
            builtin: Some(Builtin::Memory {
                max_chars: 60,
                ops: ops.iter().map(|o| o.to_string()).collect(),
            }),
        },
    );
    s
}

/// The model asks for `arguments` on the memory tool as call `m`/`t`; the session runs it.
fn edit(s: &mut Session, m: &str, t: &str, arguments: Value) {
    let actions = s.send(answer(m, "", vec![("memory", arguments)])).unwrap();
    assert!(
        matches!(&actions[..], [Action::RunTool { call_id, .. }] if call_id == t),
        "{actions:?}"
    );
    s.send(Input::RunBuiltin {
        call_id: t.into(),
        now: now(),
    })
    .unwrap();
}

#[test]
fn the_memory_tool_edits_the_block_inside_its_decision() {
    let mut s = session(ApprovalPolicy::Never);
    s.send(user("Keep in mind: my dentist is on Friday."))
        .unwrap();
    let from = s.journal.len();
    edit(
        &mut s,
        "m1",
        "t1",
        json!({"op": "append", "text": "Dentist: Friday"}),
    );
    assert_eq!(
        s.kinds_since(from),
        [
            "model_call_finished",
            "tool_call_requested",
            "tool_call_started",
            "memory_updated",
            "tool_call_finished",
            "model_call_started"
        ]
    );
    assert_eq!(s.state.memory, "Dentist: Friday");
    assert!(matches!(
        s.journal.iter().rev().nth(1),
        Some(SessionEvent::ToolCallFinished { result, .. })
            if *result == json!({"saved": "Dentist: Friday"})
    ));
    // Too long for the block: the call fails back to the model, the block is unchanged.
    edit(
        &mut s,
        "m2",
        "t2",
        json!({"op": "append", "text": "x".repeat(50)}),
    );
    assert!(matches!(
        s.journal.iter().rev().nth(1),
        Some(SessionEvent::ToolCallFailed { error, .. }) if error.contains("more than its 60")
    ));
    assert_eq!(s.state.memory, "Dentist: Friday");
    s.send(answer("m3", "Noted: your dentist is on Friday.", vec![]))
        .unwrap();
    assert_eq!(s.replayed(), s.state);
    check(&s);

    // A compaction drops turns, never the block.
    s.send(user("And my wifi?")).unwrap();
    s.send(Input::Compact(stead_actors::events::Compaction {
        call_id: "m4".into(),
        entries: 6,
        turns: 1,
        summary: Some("They talked about a dentist.".into()),
        model: Some("double".into()),
        tokens_before: 500,
        tokens_after: 100,
    }))
    .unwrap();
    assert_eq!(s.state.memory, "Dentist: Friday");
    assert_eq!(s.replayed(), s.state);
}

#[test]
fn an_approval_policy_applies_to_the_memory_tool() {
    let mut s = session(ApprovalPolicy::Always);
    s.send(user("Forget my dentist.")).unwrap();
    s.send(answer(
        "m1",
        "",
        vec![("memory", json!({"op": "remove", "old": "Dentist"}))],
    ))
    .unwrap();
    assert_eq!(s.state.status(), "awaiting_approval");
    assert_eq!(s.state.memory, "");
    s.send(decision("t1", true, ApprovalScope::Once)).unwrap();
    s.send(Input::RunBuiltin {
        call_id: "t1".into(),
        now: now(),
    })
    .unwrap();
    // Nothing to remove: the call fails back to the model.
    assert!(matches!(
        s.journal.iter().rev().nth(1),
        Some(SessionEvent::ToolCallFailed { error, .. }) if error.contains("no line")
    ));
    check(&s);
}

#[test]
fn an_entry_runs_only_the_ops_it_offers() {
    let mut s = session_offering(ApprovalPolicy::Never, &["append"]);
    s.send(user("Keep my dentist, then drop it.")).unwrap();
    edit(
        &mut s,
        "m1",
        "t1",
        json!({"op": "append", "text": "Dentist: Friday"}),
    );
    edit(
        &mut s,
        "m2",
        "t2",
        json!({"op": "remove", "old": "Dentist"}),
    );
    assert!(matches!(
        s.journal.iter().rev().nth(1),
        Some(SessionEvent::ToolCallFailed { error, .. })
            if error == "`memory` does not offer op \"remove\"; it offers append"
    ));
    assert_eq!(s.state.memory, "Dentist: Friday");
    check(&s);
}

//! A model call a budget refused: the turn parks on a budget approval, recovery does not make
//! the call again while it waits, and a decision by someone who may allow spending makes it
//! again (with the overspend) or fails it.

use super::*;
use stead_actors::{BudgetRefusal, Decider};

fn refused(call_id: &str) -> Input {
    Input::ModelBudgetExceeded {
        call_id: call_id.into(),
        refusal: BudgetRefusal {
            budget: "key `ci`".into(),
            needed_usd: 0.25,
            message: "budget_exceeded: the budget of key `ci` (1 USD in all) is spent".into(),
        },
    }
}

fn spend(approved: bool, overspend_usd: Option<f64>, may_spend: bool) -> Input {
    Input::Decision {
        call_id: "m1".into(),
        approved,
        reason: (!approved).then(|| "not this month".into()),
        decided_by: Decider::ProjectKey(uuid::Uuid::nil()),
        scope: ApprovalScope::Once,
        args_hash: None,
        overspend_usd,
        may_spend,
    }
}

/// A parked session: its first model call refused by the key's budget.
fn parked() -> Session {
    let mut s = Session::new();
    s.send(user("summarise the report")).unwrap();
    assert!(s.send(refused("m1")).unwrap().is_empty());
    s
}

#[test]
fn a_refused_model_call_parks_the_turn_and_recovery_waits() {
    let s = parked();
    assert_eq!(
        s.journal.last(),
        Some(&SessionEvent::BudgetApprovalRequested {
            call_id: "m1".into(),
            budget: "key `ci`".into(),
            needed_usd: 0.25,
            reason: "budget_exceeded: the budget of key `ci` (1 USD in all) is spent".into(),
        })
    );
    assert_eq!(
        s.state.status(),
        stead_persistence::SessionStatus::AwaitingApproval
    );
    let turn = s.state.turn.as_ref().unwrap();
    assert_eq!(turn.model_call.as_deref(), Some("m1"));
    assert_eq!(s.replayed(), s.state);
    // An activation while it waits makes no model call.
    let decision = decide(&s.state, "s1", Input::Recover, &s.agent).unwrap();
    assert!(decision.actions.is_empty(), "{:?}", decision.actions);
    assert!(decision.events.is_empty());
}

#[test]
fn an_approved_overspend_makes_the_same_call_again_with_the_grant() {
    let mut s = parked();
    let actions = s.send(spend(true, Some(0.5), true)).unwrap();
    assert_eq!(
        actions,
        vec![Action::CallModel {
            call_id: "m1".into()
        }]
    );
    assert_eq!(
        s.journal.last(),
        Some(&SessionEvent::BudgetApprovalDecided {
            call_id: "m1".into(),
            approved: true,
            overspend_usd: Some(0.5),
            reason: None,
            decided_by: Decider::ProjectKey(uuid::Uuid::nil()),
        })
    );
    let turn = s.state.turn.as_ref().unwrap();
    assert_eq!(turn.budget_grant, Some(0.5));
    assert!(turn.budget_wait.is_none());
    assert_eq!(s.state.status(), stead_persistence::SessionStatus::Running);
    // A crash now: recovery makes the call again, still granted.
    let decision = decide(&s.state, "s1", Input::Recover, &s.agent).unwrap();
    assert_eq!(decision.actions, actions);
    // The call answers: the turn ends where it would have, and the grant is spent.
    s.send(answer("m1", "The report says sales rose.", vec![]))
        .unwrap();
    assert!(s.state.turn.is_none());
    assert_eq!(
        s.kinds_since(s.journal.len() - 3),
        ["model_call_finished", "assistant_message", "turn_finished"]
    );
    // A second decision on it is a conflict.
    assert_eq!(
        s.send(spend(true, None, true)),
        Err(Refusal::AlreadyDecided)
    );
    assert_eq!(s.replayed(), s.state);
}

#[test]
fn an_approval_without_an_amount_grants_the_shortfall_and_a_second_refusal_parks_again() {
    let mut s = parked();
    s.send(spend(true, None, true)).unwrap();
    assert_eq!(s.state.turn.as_ref().unwrap().budget_grant, Some(0.25));
    // Still refused (others spent meanwhile): it parks again, and is decided again.
    s.send(refused("m1")).unwrap();
    assert!(s.state.turn.as_ref().unwrap().budget_wait.is_some());
    assert!(s.send(spend(true, Some(1.0), true)).is_ok());
    assert_eq!(s.state.turn.as_ref().unwrap().budget_grant, Some(1.0));
}

#[test]
fn a_rejected_overspend_fails_the_call_and_ends_the_turn_with_the_reason() {
    let mut s = parked();
    let from = s.journal.len();
    assert!(s.send(spend(false, None, true)).unwrap().is_empty());
    assert_eq!(
        s.kinds_since(from),
        [
            "budget_approval_decided",
            "model_call_failed",
            "turn_finished"
        ]
    );
    let SessionEvent::ModelCallFailed { error, .. } = &s.journal[from + 1] else {
        panic!("{:?}", s.journal[from + 1]);
    };
    assert!(
        error.contains("key `ci`") && error.contains("not this month"),
        "{error}"
    );
    assert!(s.state.turn.is_none());
    assert_eq!(s.state.status(), stead_persistence::SessionStatus::Idle);
}

#[test]
fn only_those_who_may_spend_decide_and_a_tool_approval_takes_no_overspend() {
    let mut s = parked();
    let before = s.journal.len();
    assert_eq!(
        s.send(spend(true, None, false)),
        Err(Refusal::SpendRequired)
    );
    assert_eq!(
        s.send(spend(false, None, false)),
        Err(Refusal::SpendRequired)
    );
    assert_eq!(s.journal.len(), before, "a refusal journals nothing");
    // A tool call's approval refuses an overspend.
    let mut t = Session::new();
    t.send(user("clean up")).unwrap();
    t.send(answer(
        "m1",
        "",
        vec![("delete_records", json!({"table": "logs"}))],
    ))
    .unwrap();
    let mut with_amount = decision("t1", true, ApprovalScope::Once);
    if let Input::Decision { overspend_usd, .. } = &mut with_amount {
        *overspend_usd = Some(1.0);
    }
    assert_eq!(t.send(with_amount), Err(Refusal::NotABudgetApproval));
    assert!(t.send(decision("t1", true, ApprovalScope::Once)).is_ok());
}

#[test]
fn a_cancel_while_parked_ends_the_turn() {
    let mut s = parked();
    s.send(Input::Cancel {
        reason: "never mind".into(),
    })
    .unwrap();
    assert!(s.state.turn.is_none());
    assert_eq!(s.state.status(), stead_persistence::SessionStatus::Idle);
    assert_eq!(
        s.send(spend(true, None, true)),
        Err(Refusal::NoSuchApproval)
    );
}

//! A model call that a key's or a project's budget refused: the turn parks on a budget
//! approval (docs/tenancy.md, "Budget approvals"), and a decision by someone who may allow
//! spending makes the call again with an overspend, or fails it.

use super::approval::Verdict;
use super::{Action, Planner, Refusal};
use crate::events::{SessionEvent, TurnEnd};
use crate::inputs::BudgetRefusal;
use stead_model::CallId;

impl Planner<'_> {
    /// The model call in flight was refused by a budget: it stays the turn's call, waiting.
    pub(super) fn model_budget_exceeded(
        &mut self,
        call_id: CallId,
        refusal: BudgetRefusal,
    ) -> Result<(), Refusal> {
        self.model_call_in_flight(&call_id)?;
        if self
            .state
            .turn
            .as_ref()
            .is_some_and(|t| t.budget_wait.is_some())
        {
            return Err(Refusal::Stale);
        }
        self.push(SessionEvent::BudgetApprovalRequested {
            call_id,
            budget: refusal.budget,
            needed_usd: refusal.needed_usd,
            reason: refusal.message,
        });
        Ok(())
    }

    /// A decision on the model call a budget parked: approved, it is made again allowed
    /// `overspend_usd` (the shortfall it parked on when not given) past its budgets; rejected,
    /// it fails with the reason and the turn ends.
    pub(super) fn budget_decided(
        &mut self,
        call_id: CallId,
        verdict: Verdict,
    ) -> Result<(), Refusal> {
        let Some(wait) = self.state.turn.as_ref().and_then(|t| t.budget_wait.clone()) else {
            return Err(Refusal::NoSuchApproval);
        };
        if !verdict.may_spend {
            return Err(Refusal::SpendRequired);
        }
        let Verdict {
            approved,
            reason,
            decided_by,
            overspend_usd,
            ..
        } = verdict;
        let why = reason
            .as_deref()
            .map_or_else(String::new, |r| format!(": {r}"));
        self.push(SessionEvent::BudgetApprovalDecided {
            call_id: call_id.clone(),
            approved,
            overspend_usd: approved.then(|| overspend_usd.unwrap_or(wait.needed_usd)),
            reason,
            decided_by: decided_by.clone(),
        });
        if approved {
            self.push_action(Action::CallModel { call_id });
            return Ok(());
        }
        self.push(SessionEvent::ModelCallFailed {
            call_id,
            error: format!(
                "the budget of {} is spent, and {decided_by} rejected an overspend{why}",
                wait.budget
            ),
        });
        self.push(SessionEvent::TurnFinished {
            reason: TurnEnd::ModelFailed,
        });
        Ok(())
    }
}

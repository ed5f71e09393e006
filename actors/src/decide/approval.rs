//! A person's decision on a parked tool call (or, through `budget.rs`, on a model call a
//! budget refused), and an approval that expired undecided.

use super::{unknown_approval, Planner, Refusal};
use stead_model::{CallId, Decider};

use crate::events::{ApprovalOutcome, ApprovalScope, SessionEvent};
use crate::policy::{args_hash, Approver};
use crate::state::CallStatus;

/// What a person decided, and what they may decide.
pub(super) struct Verdict {
    pub(super) approved: bool,
    pub(super) reason: Option<String>,
    pub(super) decided_by: Decider,
    /// A budget approval's overspend (USD).
    pub(super) overspend_usd: Option<f64>,
    /// Whether the decider may allow spending (a budget approval needs it).
    pub(super) may_spend: bool,
}

impl Planner<'_> {
    /// A decision on the parked call `call_id`: checked against the arguments it approved
    /// (`args_hash`) and against who may decide (an operator-only tool refuses a session
    /// token's approval); a rejection fails the call with its reason. A decision on the model
    /// call a budget parked goes to [`Planner::budget_decided`].
    pub(super) fn approval_decided(
        &mut self,
        call_id: CallId,
        verdict: Verdict,
        scope: ApprovalScope,
        given_hash: Option<String>,
    ) -> Result<(), Refusal> {
        if self
            .state
            .turn
            .as_ref()
            .and_then(|t| t.budget_wait.as_ref())
            .is_some_and(|wait| wait.call_id == call_id)
        {
            return self.budget_decided(call_id, verdict);
        }
        let Verdict {
            approved,
            reason,
            decided_by,
            overspend_usd,
            ..
        } = verdict;
        let call = self
            .state
            .turn
            .as_ref()
            .and_then(|t| t.call(&call_id))
            .ok_or_else(|| unknown_approval(&self.state, &call_id))?;
        if let CallStatus::Held { result, .. } = &call.status {
            if given_hash.is_some_and(|h| h != args_hash(result)) {
                return Err(Refusal::ArgsHashMismatch);
            }
            if overspend_usd.is_some() {
                return Err(Refusal::NotABudgetApproval);
            }
            let (tool, result) = (call.tool.clone(), result.clone());
            self.held_result_decided(call_id, tool, result, (approved, reason, decided_by));
            return Ok(());
        }
        let CallStatus::AwaitingApproval { args_hash, .. } = &call.status else {
            return Err(Refusal::AlreadyDecided);
        };
        if given_hash.is_some_and(|h| &h != args_hash) {
            return Err(Refusal::ArgsHashMismatch);
        }
        if overspend_usd.is_some() {
            return Err(Refusal::NotABudgetApproval);
        }
        let operator_only = self
            .agent
            .tool(&self.state, &call.tool)
            .is_some_and(|r| r.approver == Approver::Operator);
        if approved && operator_only && decided_by.is_session_token() {
            return Err(Refusal::OperatorRequired);
        }
        let tool = call.tool.clone();
        self.push(SessionEvent::ApprovalDecided {
            call_id: call_id.clone(),
            approved,
            reason: reason.clone(),
            decided_by: decided_by.clone(),
            scope,
        });
        if !approved {
            let why = reason.map_or_else(String::new, |r| format!(": {r}"));
            self.push(SessionEvent::ToolCallFailed {
                call_id,
                tool,
                error: format!("rejected by {decided_by}{why}"),
                in_doubt: false,
            });
        }
        Ok(())
    }

    /// Nobody decided on the parked call `call_id` in time: it is rejected by the system.
    pub(super) fn approval_expired(&mut self, call_id: CallId) -> Result<(), Refusal> {
        let call = self
            .state
            .turn
            .as_ref()
            .and_then(|t| t.call(&call_id))
            .ok_or_else(|| unknown_approval(&self.state, &call_id))?;
        if let CallStatus::Held { result, .. } = &call.status {
            let (tool, result) = (call.tool.clone(), result.clone());
            let expired = Some(ApprovalOutcome::EXPIRED_REASON.to_string());
            self.held_result_decided(call_id, tool, result, (false, expired, Decider::System));
            return Ok(());
        }
        if !matches!(call.status, CallStatus::AwaitingApproval { .. }) {
            return Err(Refusal::AlreadyDecided);
        }
        let tool = call.tool.clone();
        self.push(SessionEvent::ApprovalDecided {
            call_id: call_id.clone(),
            approved: false,
            reason: Some(ApprovalOutcome::EXPIRED_REASON.into()),
            decided_by: Decider::System,
            scope: ApprovalScope::Once,
        });
        self.push(SessionEvent::ToolCallFailed {
            call_id,
            tool,
            error: "the approval expired before anyone decided".into(),
            in_doubt: false,
        });
        Ok(())
    }
}

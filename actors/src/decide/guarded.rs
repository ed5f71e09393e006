//! A tool result the agent's guardrails checked (docs/guardrails.md, "Tool results"): their
//! verdicts are journaled first, then the result reaches the model, fails its call (a guardrail
//! blocked it) or waits for a person (an `approve` guardrail held it) — and their decision.

use serde_json::Value;
use stead_guardrails::results::{disposition, Effect, GuardrailCheck};
use stead_model::{CallId, Decider};

use super::{Planner, Refusal};
use crate::events::{ApprovalOutcome, ApprovalScope, SessionEvent};

impl Planner<'_> {
    /// The started call `call_id` ran, and its result went through the agent's guardrails.
    pub(super) fn tool_checked(
        &mut self,
        call_id: CallId,
        result: Value,
        checks: Vec<GuardrailCheck>,
    ) -> Result<(), Refusal> {
        let tool = self.started_call(&call_id)?;
        let effect = disposition(&checks);
        let blocked = checks
            .iter()
            .find(|c| c.effect == Effect::Block)
            .map(GuardrailCheck::summary);
        self.push(SessionEvent::GuardrailChecked {
            call_id: call_id.clone(),
            tool: tool.clone(),
            checks,
            held: (effect == Effect::Approve).then(|| result.clone()),
        });
        match (effect, blocked) {
            (Effect::Block, Some(summary)) => self.push(SessionEvent::ToolCallFailed {
                call_id,
                tool,
                error: format!("the result was blocked: {summary}"),
                in_doubt: false,
            }),
            (Effect::Approve, _) => {} // held: it waits for a person
            _ => self.push(SessionEvent::ToolCallFinished {
                call_id,
                tool,
                result,
            }),
        }
        Ok(())
    }

    /// A person's decision on a held result: approved, the model sees it; rejected (or
    /// expired), the call fails with the reason. It covers this result only.
    pub(super) fn held_result_decided(
        &mut self,
        call_id: CallId,
        tool: String,
        result: Value,
        (approved, reason, decided_by): (bool, Option<String>, Decider),
    ) {
        self.push(SessionEvent::ApprovalDecided {
            call_id: call_id.clone(),
            approved,
            reason: reason.clone(),
            decided_by: decided_by.clone(),
            scope: ApprovalScope::Once,
        });
        if approved {
            self.push(SessionEvent::ToolCallFinished {
                call_id,
                tool,
                result,
            });
            return;
        }
        let error = if ApprovalOutcome::of(approved, reason.as_deref(), &decided_by)
            == ApprovalOutcome::Expired
        {
            "the result was withheld: the approval expired before anyone decided".to_string()
        } else {
            let why = reason.map_or_else(String::new, |r| format!(": {r}"));
            format!("the result was withheld: {decided_by} rejected it{why}")
        };
        self.push(SessionEvent::ToolCallFailed {
            call_id,
            tool,
            error,
            in_doubt: false,
        });
    }
}

//! The agent loop as pure decisions: `decide(state, input, agent) -> Decision`. The events of a
//! decision are journaled first; its actions run only after that commit (docs/architecture.md,
//! invariant 2). Nothing here does I/O, so every path is tested without a database, a model or
//! a tool.

mod approval;
mod budget;
mod builtins;
mod children;
mod context;
mod guarded;
mod lifecycle;
mod memory;
mod reply;
mod schedules;
mod turn;

use serde_json::Value;

use crate::events::{SessionEvent, TurnEnd};
pub use crate::inputs::{Action, Decision, Input, ModelOutput};
use crate::policy::args_hash;
pub use crate::refusal::Refusal;
pub use crate::rules::{AgentRules, DynamicToolRule, ToolRules};
use crate::state::{CallStatus, SessionState};
use stead_model::CallId;

/// Decides what `input` means for a session in `state`: a dispatcher over one method per
/// kind of input (`turn.rs`, `approval.rs`, `lifecycle.rs`, and the tools', schedules' and
/// context's own files); after an input's events, the turn moves as far as it can.
pub fn decide(
    state: &SessionState,
    session_id: &str,
    input: Input,
    agent: &AgentRules,
) -> Result<Decision, Refusal> {
    let mut next = Planner {
        state: state.clone(),
        session_id,
        agent,
        decision: Decision::default(),
    };
    if state.failed.is_some() || state.closed {
        return next.ended(input);
    }
    match input {
        Input::UserMessage {
            text,
            client_id,
            mode,
            attachments,
        } => next.user_message(text, attachments, client_id, mode)?,
        Input::ModelFinished { call_id, output } => next.model_finished(call_id, output)?,
        Input::ModelFailed { call_id, error } => next.model_failed(call_id, error)?,
        Input::ModelBudgetExceeded { call_id, refusal } => {
            next.model_budget_exceeded(call_id, refusal)?
        }
        Input::ToolFinished { call_id, result } => next.tool_finished(call_id, result)?,
        Input::ToolFailed { call_id, error } => next.tool_failed(call_id, error)?,
        Input::ToolChecked {
            call_id,
            result,
            checks,
        } => next.tool_checked(call_id, result, checks)?,
        Input::Decision {
            call_id,
            approved,
            reason,
            decided_by,
            scope,
            args_hash,
            overspend_usd,
            may_spend,
        } => {
            let verdict = approval::Verdict {
                approved,
                reason,
                decided_by,
                overspend_usd,
                may_spend,
            };
            next.approval_decided(call_id, verdict, scope, args_hash)?
        }
        Input::ApprovalExpired { call_id } => next.approval_expired(call_id)?,
        Input::Cancel { reason } => next.cancel(reason)?,
        Input::Recover => next.recover(),
        Input::CreateSchedule {
            key,
            def,
            replace,
            now,
        } => next.create_schedule(key, *def, replace, now)?,
        Input::CancelSchedule { key, reason } => next.cancel_schedule(key, reason)?,
        Input::SchedulesDue { now } => next.fire_due(now)?,
        Input::RunBuiltin { call_id, now } => next.run_builtin(call_id, now)?,
        Input::ChildStarted {
            call_id,
            child_session_id,
        } => next.child_started(call_id, child_session_id)?,
        // The actor turns it into the call's result before deciding.
        Input::ChildFinished { .. } => return Err(Refusal::Stale),
        Input::ToolsChanged { digest, tools } => next.tools_changed(digest, tools)?,
        Input::Compact(compaction) => return next.compact(compaction),
        // These end the decision where they are: the turn does not move.
        Input::SetMemory { text, by } => {
            next.push(SessionEvent::MemoryUpdated { text, by });
            return Ok(next.finish());
        }
        Input::Fail { reason } => {
            next.stop(&reason);
            next.push(SessionEvent::SessionFailed { reason });
            next.cancel_all_schedules("the session failed");
            return Ok(next.finish());
        }
        Input::Close { reason } => {
            next.stop(&reason);
            next.push(SessionEvent::SessionClosed { reason });
            next.cancel_all_schedules("the session closed");
            return Ok(next.finish());
        }
    }
    next.advance();
    Ok(next.finish())
}

/// A decision for a call not in the current turn: decided earlier, or never asked.
pub(super) fn unknown_approval(state: &SessionState, call_id: &str) -> Refusal {
    if state.decided_approvals.contains(call_id) {
        Refusal::AlreadyDecided
    } else {
        Refusal::NoSuchApproval
    }
}

pub(crate) struct Planner<'a> {
    /// The state as it will be once the decision's events so far are committed.
    pub(crate) state: SessionState,
    session_id: &'a str,
    pub(crate) agent: &'a AgentRules,
    decision: Decision,
}

impl Planner<'_> {
    pub(crate) fn finish(mut self) -> Decision {
        if !self.decision.events.is_empty() {
            self.decision.status = Some(self.state.status());
        }
        self.decision
    }

    pub(crate) fn push_action(&mut self, action: Action) {
        self.decision.actions.push(action);
    }

    /// Events decided so far.
    pub(crate) fn decision_len(&self) -> usize {
        self.decision.events.len()
    }

    pub(crate) fn push(&mut self, event: SessionEvent) {
        let seq = self.state.last_seq + 1;
        self.state.apply(seq, &event);
        self.decision.events.push(event);
    }

    pub(crate) fn started_call(&self, call_id: &str) -> Result<String, Refusal> {
        let call = self
            .state
            .turn
            .as_ref()
            .and_then(|t| t.call(call_id))
            .ok_or(Refusal::Stale)?;
        match call.status {
            CallStatus::Started { .. } => Ok(call.tool.clone()),
            _ => Err(Refusal::Stale),
        }
    }

    /// After a restart: an unfinished model call is issued again; a tool started but not
    /// finished runs again with the same key if idempotent, else is failed as in doubt.
    fn recover(&mut self) {
        let Some(turn) = self.state.turn.clone() else {
            return;
        };
        if turn.budget_wait.is_some() {
            return; // the model call waits for a decision on its budget, not for a model
        }
        if let Some(call_id) = &turn.model_call {
            self.decision.actions.push(Action::CallModel {
                call_id: call_id.clone(),
            });
            return;
        }
        for call in &turn.calls {
            if let CallStatus::Started { idempotency_key } = &call.status {
                if self
                    .rules(&call.tool)
                    .is_some_and(|r| r.idempotent || r.builtin.is_some())
                {
                    self.decision.actions.push(Action::RunTool {
                        call_id: call.call_id.clone(),
                        tool: call.tool.clone(),
                        arguments: call.arguments.clone(),
                        idempotency_key: idempotency_key.clone(),
                    });
                } else {
                    self.push(SessionEvent::ToolCallFailed {
                        call_id: call.call_id.clone(),
                        tool: call.tool.clone(),
                        error: "in doubt: the process stopped while this call ran, and the tool is not idempotent; it was not retried. Ask the user whether it took effect.".into(),
                        in_doubt: true,
                    });
                }
            }
        }
    }

    fn rules(&self, tool: &str) -> Option<ToolRules> {
        self.agent.tool(&self.state, tool)
    }

    /// `tool_call_cancelled` for every call that runs, and the actions that tell them to stop.
    fn cancel_running(&mut self, reason: &str) {
        let Some(turn) = self.state.turn.clone() else {
            return;
        };
        for call in &turn.calls {
            if matches!(call.status, CallStatus::Started { .. }) {
                self.decision.actions.push(Action::AbortTool {
                    call_id: call.call_id.clone(),
                });
                self.push(SessionEvent::ToolCallCancelled {
                    call_id: call.call_id.clone(),
                    tool: call.tool.clone(),
                    reason: reason.to_string(),
                });
            }
        }
    }

    /// Moves the turn forward as far as it can go without waiting for anything.
    fn advance(&mut self) {
        loop {
            let Some(turn) = self.state.turn.clone() else {
                return;
            };
            if turn.model_call.is_some() {
                return;
            }
            // Apply policies to newly requested calls, in the model's order.
            if let Some(call) = turn
                .calls
                .iter()
                .find(|c| c.status == CallStatus::Requested)
            {
                if !self.may_start_beside_running(&turn, &call.tool) {
                    return; // it waits for the calls that run
                }
                let rules = self.rules(&call.tool);
                let invalid = rules
                    .as_ref()
                    .and_then(|rules| rules.arguments.check(&call.arguments));
                let event = match rules {
                    None => SessionEvent::ToolCallFailed {
                        call_id: call.call_id.clone(),
                        tool: call.tool.clone(),
                        error: format!("unknown tool `{}`", call.tool),
                        in_doubt: false,
                    },
                    Some(_) if invalid.is_some() => {
                        let problem = invalid.unwrap_or_default();
                        SessionEvent::ToolCallFailed {
                            call_id: call.call_id.clone(),
                            tool: call.tool.clone(),
                            error: format!("invalid arguments: {problem}"),
                            in_doubt: false,
                        }
                    }
                    Some(rules) if delegates(&rules) && self.delegation_refused(call).is_some() => {
                        SessionEvent::ToolCallFailed {
                            call_id: call.call_id.clone(),
                            tool: call.tool.clone(),
                            error: self.delegation_refused(call).unwrap_or_default(),
                            in_doubt: false,
                        }
                    }
                    Some(rules) => {
                        let needs = if self.state.approved_tools.contains(&call.tool) {
                            None
                        } else {
                            rules.approval.requires_approval(&call.arguments)
                        };
                        match needs {
                            Some(reason) => SessionEvent::ApprovalRequested {
                                call_id: call.call_id.clone(),
                                tool: call.tool.clone(),
                                arguments: call.arguments.clone(),
                                args_hash: args_hash(&call.arguments),
                                reason,
                            },
                            None => self.start(
                                call.call_id.clone(),
                                call.tool.clone(),
                                call.arguments.clone(),
                            ),
                        }
                    }
                };
                self.push(event);
                continue;
            }
            if turn.awaiting_approval() {
                return; // parked: nothing runs until a decision arrives
            }
            if let Some(call) = turn.calls.iter().find(|c| c.status == CallStatus::Approved) {
                if !self.may_start_beside_running(&turn, &call.tool) {
                    return; // it waits for the calls that run
                }
                let event = self.start(
                    call.call_id.clone(),
                    call.tool.clone(),
                    call.arguments.clone(),
                );
                self.push(event);
                continue;
            }
            if turn
                .calls
                .iter()
                .any(|c| matches!(c.status, CallStatus::Started { .. }))
            {
                return; // a tool is running
            }
            // Every call is done (or there were none and the model must answer).
            if turn.model_calls >= self.agent.max_steps {
                self.push(SessionEvent::TurnFinished {
                    reason: TurnEnd::MaxSteps,
                });
                continue;
            }
            let call_id = CallId::new(format!("m{}", self.state.model_calls_total + 1));
            let route = self.state.route(&self.agent.route).to_string();
            self.push(SessionEvent::ModelCallStarted {
                call_id: call_id.clone(),
                model: route.clone(),
                route,
            });
            self.decision.actions.push(Action::CallModel { call_id });
            return;
        }
    }

    /// Whether a call of `tool` may start now: when nothing runs, or when it and every call
    /// that runs may run concurrently (docs/sessions.md, "Concurrent tool calls").
    fn may_start_beside_running(&self, turn: &crate::state::Turn, tool: &str) -> bool {
        let mut running = turn
            .calls
            .iter()
            .filter(|c| matches!(c.status, CallStatus::Started { .. }))
            .peekable();
        if running.peek().is_none() {
            return true;
        }
        let concurrent = |tool: &str| self.rules(tool).is_some_and(|r| runs_concurrently(&r));
        concurrent(tool) && running.all(|c| concurrent(&c.tool))
    }

    /// Why an `agent` call may not start a child: the session is as deep as delegation may go,
    /// or the answer holds more agent calls than the fan-out limit (`None`: it may).
    fn delegation_refused(&self, call: &crate::state::CallState) -> Option<String> {
        let limits = &self.agent.delegation;
        if self.state.depth() >= limits.max_depth {
            return Some(format!(
                "this session is {} delegations deep, the most this server allows \
                 (sessions.max_delegation_depth): it cannot start another agent",
                self.state.depth()
            ));
        }
        let turn = self.state.turn.as_ref()?;
        let before = turn
            .calls
            .iter()
            .take_while(|c| c.call_id != call.call_id)
            .filter(|c| self.rules(&c.tool).is_some_and(|r| delegates(&r)))
            .count();
        (before >= limits.max_fanout as usize).then(|| {
            format!(
                "this answer asks for more than {} agent calls, the most one answer may start \
                 (sessions.max_delegation_fanout): this one was not started",
                limits.max_fanout
            )
        })
    }

    /// `tool_call_started` for a call, with its action.
    fn start(&mut self, call_id: CallId, tool: String, arguments: Value) -> SessionEvent {
        let idempotency_key = format!("{}:{}", self.session_id, call_id);
        self.decision.actions.push(Action::RunTool {
            call_id: call_id.clone(),
            tool: tool.clone(),
            arguments,
            idempotency_key: idempotency_key.clone(),
        });
        SessionEvent::ToolCallStarted {
            call_id,
            tool,
            idempotency_key,
        }
    }
}

/// Whether a tool's calls start child sessions (`agent` tools).
fn delegates(rules: &ToolRules) -> bool {
    matches!(
        rules.builtin,
        Some(crate::schedule_tool::Builtin::Agent { .. })
    )
}

/// Whether a tool's calls may run beside other calls of the same answer: `agent` calls, and
/// calls of idempotent outside tools that never need approval. Schedule calls run inside a
/// decision and everything else one at a time.
fn runs_concurrently(rules: &ToolRules) -> bool {
    match rules.builtin {
        Some(_) => delegates(rules),
        None => rules.idempotent && matches!(rules.approval, crate::policy::ApprovalPolicy::Never),
    }
}

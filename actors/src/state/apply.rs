//! `SessionState::apply`: one committed event folded into the state, a dispatcher over one
//! method per kind of event.

use serde_json::{json, Value};
use stead_model::CallId;

use super::{CallState, CallStatus, SessionState, TranscriptEntry, Turn};
use crate::events::{
    ApprovalScope, Attachment, Compaction, MessageMode, Overrides, RequestedCall, SessionEvent,
    Usage,
};

impl SessionState {
    /// Folds one committed event at `seq`.
    pub fn apply(&mut self, seq: i64, event: &SessionEvent) {
        self.last_seq = seq;
        match event {
            SessionEvent::SessionCreated {
                agent,
                principal,
                parent,
            } => {
                self.agent = agent.clone();
                self.principal = principal.clone();
                self.parent = parent.clone();
            }
            SessionEvent::ChildSessionStarted {
                call_id,
                child_session_id,
            } => {
                self.children
                    .insert(call_id.clone(), child_session_id.clone());
            }
            SessionEvent::UserMessage { .. } => self.user_message(event),
            SessionEvent::ModelCallStarted { call_id, .. } => self.model_call_started(call_id),
            SessionEvent::ModelCallFinished {
                text,
                tool_calls,
                usage,
                ..
            } => self.model_call_finished(text, tool_calls, usage),
            SessionEvent::ModelCallFailed { .. } => {
                if let Some(turn) = &mut self.turn {
                    turn.model_call = None;
                    turn.budget_grant = None;
                }
            }
            SessionEvent::BudgetApprovalRequested { .. }
            | SessionEvent::BudgetApprovalDecided { .. } => self.budget_approval(event),
            SessionEvent::ToolCallRequested {
                call_id,
                tool,
                arguments,
            } => self.tool_call_requested(call_id, tool, arguments),
            SessionEvent::ApprovalRequested {
                call_id,
                args_hash,
                reason,
                ..
            } => self.approval_requested(call_id, args_hash, reason),
            SessionEvent::ApprovalDecided {
                call_id,
                approved,
                scope,
                ..
            } => self.approval_decided(call_id, *approved, *scope),
            SessionEvent::ToolCallStarted {
                call_id,
                idempotency_key,
                ..
            } => self.set_status(
                call_id,
                CallStatus::Started {
                    idempotency_key: idempotency_key.clone(),
                },
            ),
            SessionEvent::GuardrailChecked {
                call_id,
                checks,
                held,
                ..
            } => self.guardrail_checked(call_id, checks, held.as_ref()),
            SessionEvent::ToolCallFinished {
                call_id,
                tool,
                result,
            } => self.tool_call_ended(call_id, tool, CallStatus::Finished, result.clone()),
            SessionEvent::ToolCallFailed {
                call_id,
                tool,
                error,
                in_doubt,
            } => self.tool_call_ended(
                call_id,
                tool,
                CallStatus::Failed {
                    in_doubt: *in_doubt,
                },
                json!({ "error": error }),
            ),
            // Every call the model asked for gets an answer in the transcript.
            SessionEvent::ToolCallCancelled {
                call_id,
                tool,
                reason,
            } => self.tool_call_ended(
                call_id,
                tool,
                CallStatus::Cancelled,
                json!({ "error": format!("cancelled: {reason}") }),
            ),
            SessionEvent::ToolsSeen { digest, tools } => {
                self.seen_tools = tools.iter().cloned().collect();
                self.seen_tools_digest = Some(digest.clone());
            }
            SessionEvent::AssistantMessage { text, fallback } => {
                // A model's reply is in the transcript since its `model_call_finished`; a
                // built one joins it here.
                if *fallback {
                    self.transcript.push_back(TranscriptEntry::Assistant {
                        text: text.clone(),
                        tool_calls: Vec::new(),
                    });
                }
            }
            SessionEvent::ContextCompacted(compaction) => self.compacted(compaction),
            SessionEvent::MemoryUpdated { text, .. } => self.memory = text.clone(),
            SessionEvent::ReplyRejected { .. } => self.reply_rejected(),
            SessionEvent::ScheduleCreated { .. }
            | SessionEvent::ScheduleSkipped { .. }
            | SessionEvent::ScheduleCancelled { .. } => {
                crate::schedules::apply(&mut self.schedules, event)
            }
            SessionEvent::ScheduleFired { at, .. } => {
                self.schedule_fired(*at);
                crate::schedules::apply(&mut self.schedules, event)
            }
            SessionEvent::SessionFailed { reason } => {
                self.failed = Some(reason.clone());
                self.end();
            }
            SessionEvent::SessionForked {
                from,
                at,
                overrides,
                principal,
            } => self.forked(from, *at, overrides, principal.as_ref()),
            SessionEvent::SessionClosed { .. } => {
                self.closed = true;
                self.end();
            }
            SessionEvent::TurnFinished { .. } | SessionEvent::TurnCancelled { .. } => {
                self.turn_ended()
            }
        }
    }

    fn user_message(&mut self, event: &SessionEvent) {
        let SessionEvent::UserMessage {
            text,
            client_id,
            mode,
            schedule,
            attachments,
        } = event
        else {
            return;
        };
        if let Some(id) = client_id {
            self.client_ids.insert(id.to_string());
        }
        let (mode, attachments) = (*mode, attachments.clone());
        match (&mut self.turn, mode) {
            (None, _) => self.start_turn(text.to_string(), attachments),
            // Ahead of the queue (and of the interrupted turn's steering): the
            // `turn_cancelled` that follows starts it.
            (Some(turn), Some(MessageMode::Interrupt)) => {
                for (steer, files) in take_steering(turn).into_iter().rev() {
                    self.queue_front(steer, files);
                }
                self.queue_front(text.to_string(), attachments);
            }
            (Some(turn), Some(MessageMode::Steer)) => {
                turn.steering_attachments
                    .resize(turn.steering.len(), Vec::new());
                turn.steering.push(text.to_string());
                turn.steering_attachments.push(attachments);
            }
            (Some(_), _) => {
                self.align_queue();
                self.queued.push_back(text.to_string());
                self.queued_from.push_back(schedule.clone());
                self.queued_attachments.push_back(attachments);
            }
        }
    }

    /// A model call starts: the steering that came while the turn ran joins the transcript.
    fn model_call_started(&mut self, call_id: &str) {
        self.model_calls_total += 1;
        let steering = self.turn.as_mut().map(take_steering).unwrap_or_default();
        for (text, attachments) in steering {
            self.transcript
                .push_back(TranscriptEntry::User { text, attachments });
        }
        if let Some(turn) = &mut self.turn {
            turn.model_calls += 1;
            turn.model_call = Some(CallId::from(call_id));
            turn.calls.clear();
        }
    }

    /// A model call parked on a budget, or its decision (the call then carries the grant).
    fn budget_approval(&mut self, event: &SessionEvent) {
        match event {
            SessionEvent::BudgetApprovalRequested {
                call_id,
                budget,
                needed_usd,
                reason,
            } => {
                if let Some(turn) = &mut self.turn {
                    turn.budget_wait = Some(super::BudgetWait {
                        call_id: call_id.clone(),
                        budget: budget.clone(),
                        needed_usd: *needed_usd,
                        reason: reason.clone(),
                    });
                }
            }
            SessionEvent::BudgetApprovalDecided {
                call_id,
                approved,
                overspend_usd,
                ..
            } => {
                self.decided_approvals.insert(call_id.to_string());
                if let Some(turn) = &mut self.turn {
                    turn.budget_wait = None;
                    turn.budget_grant = approved.then(|| overspend_usd.unwrap_or(0.0));
                }
            }
            _ => {}
        }
    }

    fn model_call_finished(&mut self, text: &str, tool_calls: &[RequestedCall], usage: &Usage) {
        self.usage.prompt_tokens += usage.prompt_tokens;
        self.usage.completion_tokens += usage.completion_tokens;
        self.transcript.push_back(TranscriptEntry::Assistant {
            text: text.to_string(),
            tool_calls: tool_calls.to_vec(),
        });
        if let Some(turn) = &mut self.turn {
            turn.model_call = None;
            turn.budget_grant = None;
        }
    }

    fn tool_call_requested(&mut self, call_id: &str, tool: &str, arguments: &Value) {
        self.tool_calls_total += 1;
        if let Some(turn) = &mut self.turn {
            turn.calls.push(CallState {
                call_id: CallId::new(call_id.to_string()),
                tool: tool.to_string(),
                arguments: arguments.clone(),
                status: CallStatus::Requested,
            });
        }
    }

    /// An approval: the call may start (and with the session scope, its tool needs no more
    /// approvals); a rejection is followed by the call's `tool_call_failed`.
    fn approval_requested(&mut self, call_id: &str, args_hash: &str, reason: &str) {
        let waiting = CallStatus::AwaitingApproval {
            args_hash: args_hash.to_string(),
            reason: reason.to_string(),
        };
        self.set_status(call_id, waiting);
    }

    /// A checked tool result: the placeholders it gave; a held result parks its call.
    fn guardrail_checked(
        &mut self,
        call_id: &str,
        checks: &[stead_guardrails::results::GuardrailCheck],
        held: Option<&Value>,
    ) {
        self.placeholders_given(checks);
        if let Some(result) = held {
            let held = CallStatus::Held {
                result: result.clone(),
                checks: checks.to_vec(),
            };
            self.set_status(call_id, held);
        }
    }

    /// The placeholders a `guardrail_checked` gave: later ones number on from them.
    fn placeholders_given(&mut self, checks: &[stead_guardrails::results::GuardrailCheck]) {
        let given = checks.iter().flat_map(|c| &c.findings);
        for placeholder in given.filter_map(|f| f.placeholder.as_deref()) {
            if let Some((entity, n)) = stead_guardrails::Placeholders::parse(placeholder) {
                let highest = self.placeholders.entry(entity.to_string()).or_default();
                *highest = (*highest).max(n);
            }
        }
    }

    fn approval_decided(&mut self, call_id: &str, approved: bool, scope: ApprovalScope) {
        self.decided_approvals.insert(call_id.to_string());
        if approved {
            if scope == ApprovalScope::Session {
                if let Some(tool) = self.turn.as_ref().and_then(|t| t.call(call_id)) {
                    self.approved_tools.insert(tool.tool.clone());
                }
            }
            self.set_status(call_id, CallStatus::Approved);
        }
    }

    /// A tool call ended (finished, failed or cancelled): its status, and its answer in the
    /// transcript.
    fn tool_call_ended(&mut self, call_id: &str, tool: &str, status: CallStatus, content: Value) {
        self.set_status(call_id, status);
        self.transcript.push_back(TranscriptEntry::Tool {
            call_id: CallId::new(call_id.to_string()),
            tool: tool.to_string(),
            content,
        });
    }

    fn compacted(&mut self, compaction: &Compaction) {
        let entries = usize::try_from(compaction.entries)
            .unwrap_or(usize::MAX)
            .min(self.transcript.len());
        self.transcript = self.transcript.skip(entries);
        if compaction.summary.is_some() {
            self.summary = compaction.summary.clone();
        }
        self.compactions += 1;
    }

    /// A rejected reply leaves the transcript (the repair call must not see it).
    fn reply_rejected(&mut self) {
        if matches!(
            self.transcript.last(),
            Some(TranscriptEntry::Assistant { tool_calls, .. }) if tool_calls.is_empty()
        ) {
            self.transcript.pop_back();
        }
        if let Some(turn) = &mut self.turn {
            turn.rejected_replies += 1;
        }
    }

    /// Counts a firing towards the hourly limit (the firings of the last hour are kept).
    fn schedule_fired(&mut self, at: chrono::DateTime<chrono::Utc>) {
        let hour_before = at - chrono::Duration::hours(1);
        while self
            .recent_firings
            .front()
            .is_some_and(|t| *t <= hour_before)
        {
            self.recent_firings.pop_front();
        }
        self.recent_firings.push_back(at);
    }

    /// The session ended (failed or closed): no turn, nothing queued.
    fn end(&mut self) {
        self.turn = None;
        self.queued.clear();
        self.queued_from.clear();
        self.queued_attachments.clear();
    }

    fn forked(&mut self, from: &str, at: i64, overrides: &Overrides, principal: Option<&String>) {
        self.forked_from = Some((from.to_string(), at));
        // A fork is a session of its own, not a child: it reports to no parent. Its agent
        // calls that still wait start children of the fork's own when it recovers
        // (docs/sessions.md, "Forks and exports of trees"); the source's children are never
        // touched.
        self.parent = None;
        if let Some(turn) = &self.turn {
            for call in &turn.calls {
                if matches!(call.status, CallStatus::Started { .. }) {
                    self.children.remove(&call.call_id);
                }
            }
        }
        if principal.is_some() {
            self.principal = principal.cloned();
        }
        if overrides.route.is_some() {
            self.overrides.route = overrides.route.clone();
        }
        if overrides.system_prompt.is_some() {
            self.overrides.system_prompt = overrides.system_prompt.clone();
        }
    }

    /// The turn ended: steering no model call took becomes the next turn's message, and the
    /// next queued message starts its turn.
    fn turn_ended(&mut self) {
        if let Some(mut turn) = self.turn.take() {
            for (text, attachments) in take_steering(&mut turn).into_iter().rev() {
                self.queue_front(text, attachments);
            }
        }
        self.align_queue();
        if let Some(next) = self.queued.pop_front() {
            self.queued_from.pop_front();
            let attachments = self.queued_attachments.pop_front().unwrap_or_default();
            self.start_turn(next, attachments);
        }
    }
}

/// The turn's steering messages with their attachments, taken out of it.
fn take_steering(turn: &mut Turn) -> Vec<(String, Vec<Attachment>)> {
    let texts = std::mem::take(&mut turn.steering);
    let mut files = std::mem::take(&mut turn.steering_attachments).into_iter();
    texts
        .into_iter()
        .map(|text| (text, files.next().unwrap_or_default()))
        .collect()
}

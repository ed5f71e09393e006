//! The turn's own inputs: a user's message, a model call's and a tool call's outcome, a cancel,
//! and the tools an agent's dynamic sources list.

use serde_json::Value;

use super::{Action, ModelOutput, Planner, Refusal};
use crate::events::{Attachment, MessageMode, RequestedCall, SeenTool, SessionEvent, TurnEnd};
use stead_model::CallId;

impl Planner<'_> {
    /// A user's message: it starts a turn, or — while one runs — waits, steers, interrupts
    /// or is refused, by its mode (the agent's when the message names none).
    pub(super) fn user_message(
        &mut self,
        text: String,
        attachments: Vec<Attachment>,
        client_id: Option<String>,
        mode: Option<MessageMode>,
    ) -> Result<(), Refusal> {
        if client_id
            .as_ref()
            .is_some_and(|id| self.state.client_ids.contains(id))
        {
            return Err(Refusal::DuplicateClientId);
        }
        let mode = mode.unwrap_or(self.agent.message_mode);
        let Some(turn) = &self.state.turn else {
            self.push(SessionEvent::UserMessage {
                text,
                client_id,
                mode: None,
                schedule: None,
                attachments,
            });
            return Ok(());
        };
        let model_call = turn.model_call.clone();
        match mode {
            MessageMode::Queue => self.push(SessionEvent::UserMessage {
                text,
                client_id,
                mode: None,
                schedule: None,
                attachments,
            }),
            MessageMode::DropIfBusy => return Err(Refusal::Busy),
            MessageMode::Steer => self.push(SessionEvent::UserMessage {
                text,
                client_id,
                mode: Some(MessageMode::Steer),
                schedule: None,
                attachments,
            }),
            MessageMode::Interrupt => {
                // The running turn stops as a cancel stops it; the message goes ahead of
                // the queue, so the `turn_cancelled` starts its turn.
                let reason = "interrupted by a new message".to_string();
                if let Some(call_id) = model_call {
                    self.push_action(Action::AbortModelCall { call_id });
                }
                self.cancel_running(&reason);
                self.push(SessionEvent::UserMessage {
                    text,
                    client_id,
                    mode: Some(MessageMode::Interrupt),
                    schedule: None,
                    attachments,
                });
                self.push(SessionEvent::TurnCancelled { reason });
            }
        }
        Ok(())
    }

    /// The model call in flight answered: its text becomes the reply, or its tool calls are
    /// requested (numbered on from every call the session has seen).
    pub(super) fn model_finished(
        &mut self,
        call_id: CallId,
        output: ModelOutput,
    ) -> Result<(), Refusal> {
        self.model_call_in_flight(&call_id)?;
        let total = self.state.tool_calls_total;
        let requested: Vec<RequestedCall> = output
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, (tool, arguments))| RequestedCall {
                call_id: CallId::new(format!("t{}", total + i as u64 + 1)),
                tool: tool.clone(),
                arguments: arguments.clone(),
            })
            .collect();
        self.push(SessionEvent::ModelCallFinished {
            call_id: call_id.clone(),
            text: output.text.clone(),
            tool_calls: requested.clone(),
            usage: output.usage,
            provider: output.provider,
            model: output.model,
            latency_ms: output.latency_ms,
            ttft_ms: output.ttft_ms,
            cost: output.cost,
            guardrails: output.guardrails,
        });
        if requested.is_empty() {
            self.reply(call_id, output.text);
        }
        for call in requested {
            self.push(SessionEvent::ToolCallRequested {
                call_id: call.call_id,
                tool: call.tool,
                arguments: call.arguments,
            });
        }
        Ok(())
    }

    /// The model call in flight failed: the turn ends with it.
    pub(super) fn model_failed(&mut self, call_id: CallId, error: String) -> Result<(), Refusal> {
        self.model_call_in_flight(&call_id)?;
        self.push(SessionEvent::ModelCallFailed { call_id, error });
        self.push(SessionEvent::TurnFinished {
            reason: TurnEnd::ModelFailed,
        });
        Ok(())
    }

    /// Refuses an outcome for a model call that is not the one in flight (a late answer).
    pub(super) fn model_call_in_flight(&self, call_id: &str) -> Result<(), Refusal> {
        let in_flight = self
            .state
            .turn
            .as_ref()
            .and_then(|t| t.model_call.as_deref());
        if in_flight == Some(call_id) {
            Ok(())
        } else {
            Err(Refusal::Stale)
        }
    }

    pub(super) fn tool_finished(&mut self, call_id: CallId, result: Value) -> Result<(), Refusal> {
        let tool = self.started_call(&call_id)?;
        self.push(SessionEvent::ToolCallFinished {
            call_id,
            tool,
            result,
        });
        Ok(())
    }

    pub(super) fn tool_failed(&mut self, call_id: CallId, error: String) -> Result<(), Refusal> {
        let tool = self.started_call(&call_id)?;
        self.push(SessionEvent::ToolCallFailed {
            call_id,
            tool,
            error,
            in_doubt: false,
        });
        Ok(())
    }

    /// Cancels the running turn: its model call is aborted, its running tools are cancelled.
    pub(super) fn cancel(&mut self, reason: String) -> Result<(), Refusal> {
        if self.state.turn.is_none() {
            return Err(Refusal::NothingToCancel);
        }
        self.stop(&reason);
        self.push(SessionEvent::TurnCancelled { reason });
        Ok(())
    }

    /// Aborts the model call in flight and cancels every running tool, for `reason`.
    pub(super) fn stop(&mut self, reason: &str) {
        if let Some(call_id) = self.state.turn.as_ref().and_then(|t| t.model_call.clone()) {
            self.push_action(Action::AbortModelCall { call_id });
        }
        self.cancel_running(reason);
    }

    /// The agent's dynamic tool sources list other tools than the session saw last.
    pub(super) fn tools_changed(
        &mut self,
        digest: String,
        tools: Vec<SeenTool>,
    ) -> Result<(), Refusal> {
        if self.state.seen_tools_digest.as_deref() == Some(digest.as_str()) {
            return Err(Refusal::Stale);
        }
        self.push(SessionEvent::ToolsSeen { digest, tools });
        Ok(())
    }
}

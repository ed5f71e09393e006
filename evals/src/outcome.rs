//! What one turn did, read from a journal: the tool calls with their arguments, results and
//! approvals, the reply, and what it cost in model calls, tokens and time. A recording and a
//! run are read by the same function, so they compare like for like.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use stead_actors::{ApprovalOutcome, SessionEvent};
use stead_persistence::Event;

/// One tool call of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallOutcome {
    pub tool: String,
    pub arguments: Value,
    /// The result the model read, when the call finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed, when it did (a rejection included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The approval it asked for and how it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
}

/// How a call's approval was decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub approved: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One turn, from its user message to its end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnOutcome {
    pub calls: Vec<CallOutcome>,
    /// The reply the person saw (the last `assistant_message` of the turn).
    pub reply: String,
    /// The reply was built from the tool results: the model gave none that could be shown.
    #[serde(default)]
    pub fallback: bool,
    pub model_calls: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// What the turn's model calls cost, by the routes' prices (USD).
    #[serde(default)]
    pub cost_usd: f64,
    /// From the user message to the turn's end, by the journal's times.
    pub latency_ms: f64,
    /// How the turn ended (`completed`, `max_steps`, `cancelled`, `failed`…); empty when the
    /// journal ends before the turn does.
    pub end: String,
    /// Each finished model call's time to its first token (ms), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ttft_ms: Vec<f64>,
    /// Answers dropped as unusable (`reply_rejected`: each one a repair call or, the last, a
    /// reply built from the results).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rejected_replies: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl TurnOutcome {
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }

    pub fn finished(&self) -> bool {
        !self.end.is_empty()
    }
}

/// The turn that the user message at `at_seq` started, read from `events` (the journal from
/// that message on; earlier events are skipped). Calls are in the order the model asked for
/// them.
pub fn read_turn(events: &[Event], at_seq: i64) -> TurnOutcome {
    let mut outcome = TurnOutcome::default();
    let mut ids: Vec<String> = Vec::new();
    let mut started = None;
    for event in events.iter().filter(|e| e.seq >= at_seq) {
        let Some(typed) = SessionEvent::from_parts(&event.kind, &event.payload) else {
            continue;
        };
        let call = |ids: &Vec<String>, id: &str| ids.iter().position(|c| c == id);
        match typed {
            SessionEvent::UserMessage { .. } if event.seq == at_seq => {
                started = Some(event.created_at);
            }
            SessionEvent::ModelCallFinished {
                usage,
                cost,
                ttft_ms,
                ..
            } => {
                outcome.model_calls += 1;
                outcome.ttft_ms.push(ttft_ms);
                outcome.cost_usd += cost;
                outcome.prompt_tokens += usage.prompt_tokens;
                outcome.completion_tokens += usage.completion_tokens;
            }
            SessionEvent::ModelCallFailed { .. } => outcome.model_calls += 1,
            SessionEvent::ReplyRejected { .. } => outcome.rejected_replies += 1,
            SessionEvent::ToolCallRequested {
                call_id,
                tool,
                arguments,
            } => {
                ids.push(call_id.to_string());
                outcome.calls.push(CallOutcome {
                    tool,
                    arguments,
                    result: None,
                    error: None,
                    approval: None,
                });
            }
            SessionEvent::ApprovalDecided {
                call_id,
                approved,
                reason,
                decided_by,
                ..
            } => {
                if let Some(i) = call(&ids, &call_id) {
                    let expired = ApprovalOutcome::of(approved, reason.as_deref(), &decided_by)
                        == ApprovalOutcome::Expired;
                    outcome.calls[i].approval = Some(Approval {
                        approved,
                        reason: if expired {
                            Some(ApprovalOutcome::EXPIRED_REASON.into())
                        } else {
                            reason
                        },
                    });
                }
            }
            SessionEvent::ToolCallFinished {
                call_id, result, ..
            } => {
                if let Some(i) = call(&ids, &call_id) {
                    outcome.calls[i].result = Some(result);
                }
            }
            SessionEvent::ToolCallFailed { call_id, error, .. } => {
                if let Some(i) = call(&ids, &call_id) {
                    outcome.calls[i].error = Some(error);
                }
            }
            SessionEvent::AssistantMessage { text, fallback } => {
                outcome.reply = text;
                outcome.fallback = fallback;
            }
            SessionEvent::TurnFinished { reason } => {
                outcome.end = reason.as_str().to_string();
            }
            SessionEvent::TurnCancelled { .. } => outcome.end = "cancelled".into(),
            SessionEvent::SessionFailed { .. } => outcome.end = "failed".into(),
            _ => {}
        }
        if outcome.finished() {
            if let Some(started) = started {
                let micros = (event.created_at - started).num_microseconds().unwrap_or(0);
                outcome.latency_ms = micros as f64 / 1000.0;
            }
            break;
        }
    }
    outcome
}

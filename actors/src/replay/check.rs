//! The decision check: re-drives the current agent loop over a recorded journal and reports
//! the first step where it decides differently from the record.

use serde::Serialize;
use serde_json::{json, Value};
use stead_persistence::Event;
use uuid::Uuid;

use super::fold::typed;
use super::IMPORTED_FROM;
use crate::decide::{decide, AgentRules, Input, ModelOutput};
use crate::events::{ApprovalOutcome, SessionEvent};
use crate::state::SessionState;

/// Where the current code decides differently from the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Divergence {
    pub seq: i64,
    /// The recorded event at `seq` (`{kind, payload}`), or `None` past the journal's end.
    pub recorded: Option<Value>,
    /// What the current code decides at `seq`, or `None` when it takes no step there.
    pub decided: Option<Value>,
    pub explanation: String,
}

/// The outcome of checking one recorded journal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckReport {
    pub events: usize,
    /// Inputs re-decided (user messages, model outputs, tool results, decisions, …).
    pub decisions: usize,
    /// The first divergence, if any.
    pub divergence: Option<Divergence>,
}

fn parts(event: &SessionEvent) -> Value {
    let (kind, payload) = event.to_parts();
    json!({ "kind": kind, "payload": payload })
}

/// What happened from outside at a decision boundary, read from the recorded event there (and,
/// for a checked tool result, the outcome after it, which holds the result the guardrails
/// left). `None`: a structural event folded as is (`session_created`, `session_forked`).
fn recorded_input(event: &SessionEvent, next: Option<&SessionEvent>) -> Option<Input> {
    Some(match event.clone() {
        SessionEvent::GuardrailChecked {
            call_id,
            checks,
            held,
            ..
        } => checked_input(call_id, checks, held, next),
        SessionEvent::SessionCreated { .. } | SessionEvent::SessionForked { .. } => return None,
        SessionEvent::UserMessage {
            text,
            client_id,
            mode,
            attachments,
            ..
        } => Input::UserMessage {
            text,
            client_id,
            // What was recorded, whatever the agent's default is now.
            mode: Some(mode.unwrap_or_default()),
            attachments,
        },
        SessionEvent::ModelCallFinished {
            call_id,
            text,
            tool_calls,
            usage,
            provider,
            model,
            latency_ms,
            ttft_ms,
            cost,
            guardrails,
        } => Input::ModelFinished {
            call_id,
            output: ModelOutput {
                text,
                tool_calls: tool_calls
                    .into_iter()
                    .map(|c| (c.tool, c.arguments))
                    .collect(),
                usage,
                provider,
                model,
                latency_ms,
                ttft_ms,
                cost,
                guardrails,
            },
        },
        SessionEvent::ModelCallFailed { call_id, error } => Input::ModelFailed { call_id, error },
        SessionEvent::BudgetApprovalRequested {
            call_id,
            budget,
            needed_usd,
            reason,
        } => Input::ModelBudgetExceeded {
            call_id,
            refusal: crate::inputs::BudgetRefusal {
                budget,
                needed_usd,
                message: reason,
            },
        },
        SessionEvent::BudgetApprovalDecided {
            call_id,
            approved,
            overspend_usd,
            reason,
            decided_by,
        } => Input::Decision {
            call_id,
            approved,
            reason,
            decided_by,
            scope: crate::events::ApprovalScope::Once,
            args_hash: None,
            overspend_usd,
            // It was accepted: whoever decided could.
            may_spend: true,
        },
        SessionEvent::ToolCallFinished {
            call_id, result, ..
        } => Input::ToolFinished { call_id, result },
        // An in-doubt failure is what recovery decides after a restart.
        SessionEvent::ToolCallFailed { in_doubt: true, .. } => Input::Recover,
        SessionEvent::ToolCallFailed { call_id, error, .. } => Input::ToolFailed { call_id, error },
        SessionEvent::ApprovalDecided {
            call_id,
            approved,
            reason,
            decided_by,
            ..
        } if ApprovalOutcome::of(approved, reason.as_deref(), &decided_by)
            == ApprovalOutcome::Expired =>
        {
            Input::ApprovalExpired { call_id }
        }
        SessionEvent::ApprovalDecided {
            call_id,
            approved,
            reason,
            decided_by,
            scope,
        } => Input::Decision {
            call_id,
            approved,
            reason,
            decided_by,
            scope,
            args_hash: None,
            overspend_usd: None,
            may_spend: true,
        },
        SessionEvent::TurnCancelled { reason } => Input::Cancel { reason },
        SessionEvent::ToolsSeen { digest, tools } => Input::ToolsChanged { digest, tools },
        SessionEvent::ScheduleCreated {
            key,
            schedule,
            created_at,
            ..
        } => Input::CreateSchedule {
            key,
            def: Box::new(schedule),
            // It was accepted: a replace, when the key was taken.
            replace: true,
            now: created_at,
        },
        SessionEvent::ScheduleFired { at, .. } | SessionEvent::ScheduleSkipped { at, .. } => {
            Input::SchedulesDue { now: at }
        }
        SessionEvent::ScheduleCancelled { key, reason } => Input::CancelSchedule { key, reason },
        SessionEvent::ChildSessionStarted {
            call_id,
            child_session_id,
        } => Input::ChildStarted {
            call_id,
            child_session_id,
        },
        SessionEvent::ContextCompacted(compaction) => Input::Compact(compaction),
        SessionEvent::MemoryUpdated { text, by } => Input::SetMemory { text, by },
        SessionEvent::SessionFailed { reason } => Input::Fail { reason },
        SessionEvent::SessionClosed { reason } => Input::Close { reason },
        // Anything else at a boundary was decided without new input: an activation.
        _ => Input::Recover,
    })
}

/// A checked tool result as its decision took it: the verdicts are what was recorded (no
/// checker runs again), the result the held one or the one the outcome after it records.
fn checked_input(
    call_id: stead_model::CallId,
    checks: Vec<stead_guardrails::results::GuardrailCheck>,
    held: Option<Value>,
    next: Option<&SessionEvent>,
) -> Input {
    let result = match (held, next) {
        (Some(held), _) => held,
        (None, Some(SessionEvent::ToolCallFinished { result, .. })) => result.clone(),
        // Blocked: the result never reached the journal, nor the decision.
        _ => Value::Null,
    };
    Input::ToolChecked {
        call_id,
        result,
        checks,
    }
}

/// A recorded event this Stead cannot read (a kind from a newer version, or a damaged payload):
/// the journal cannot be checked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("seq {seq}: this Stead cannot read the `{kind}` event recorded there")]
pub struct Unreadable {
    pub seq: i64,
    pub kind: String,
}

/// Which session decided each seq of a journal: a fork's copied events were decided as its
/// source (up to the `session_forked` marker), an import's as the exported session (up to the
/// seq its metadata records), later ones as the session itself. Session ids matter because
/// they are part of every tool call's idempotency key.
struct Deciders {
    /// `(through_seq, session id)`, ascending by seq.
    bounds: Vec<(i64, String)>,
    own: String,
}

impl Deciders {
    fn new(own: Uuid, metadata: &Value, events: &[(i64, SessionEvent)]) -> Self {
        let mut bounds: Vec<(i64, String)> = metadata[IMPORTED_FROM]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                Some((
                    entry["through_seq"].as_i64()?,
                    entry["session_id"].as_str()?.to_string(),
                ))
            })
            .collect();
        for (seq, event) in events {
            if let SessionEvent::SessionForked { from, .. } = event {
                bounds.push((seq - 1, from.clone()));
            }
        }
        bounds.sort_by_key(|(seq, _)| *seq);
        Deciders {
            bounds,
            own: own.to_string(),
        }
    }

    fn at(&self, seq: i64) -> &str {
        self.bounds
            .iter()
            .find(|(through, _)| seq <= *through)
            .map_or(self.own.as_str(), |(_, id)| id.as_str())
    }
}

/// Re-drives the agent loop's decisions (`decide` with `rules`) over a recorded journal. At
/// each decision boundary the recorded event says what came from outside (a user message, a
/// model output, a tool result, a decision); the current code decides the events that follow,
/// and they must equal the recorded ones by value. Nothing is called. The state always
/// advances by the recorded events, so a report names the first divergence only.
pub fn check(
    session_id: Uuid,
    metadata: &Value,
    events: &[Event],
    rules: &AgentRules,
) -> Result<CheckReport, Unreadable> {
    let mut report = CheckReport {
        events: events.len(),
        decisions: 0,
        divergence: None,
    };
    let mut typed_events = Vec::with_capacity(events.len());
    for event in events {
        match typed(event) {
            Some(typed) => typed_events.push((event.seq, typed)),
            None => {
                return Err(Unreadable {
                    seq: event.seq,
                    kind: event.kind.clone(),
                })
            }
        }
    }
    let deciders = Deciders::new(session_id, metadata, &typed_events);
    let mut state = SessionState::default();
    let mut i = 0;
    while i < typed_events.len() {
        let (seq, event) = &typed_events[i];
        // A cancel, close or failure that stopped running tools journals their
        // `tool_call_cancelled` first: the input is what the event after them records.
        let at = typed_events[i..]
            .iter()
            .position(|(_, e)| !matches!(e, SessionEvent::ToolCallCancelled { .. }))
            .map_or(i, |k| i + k);
        let cause = &typed_events[at].1;
        let next = typed_events.get(at + 1).map(|(_, e)| e);
        let Some(input) = recorded_input(cause, next) else {
            state.apply(*seq, event);
            i += 1;
            continue;
        };
        // A step taken without new input is an activation, which only a fork's first
        // activation takes (finishing the decision its copy cut); anywhere else it means the
        // current code stopped before this recorded step.
        let after_fork =
            i > 0 && matches!(typed_events[i - 1].1, SessionEvent::SessionForked { .. });
        if matches!(input, Input::Recover)
            && !after_fork
            && !matches!(event, SessionEvent::ToolCallFailed { in_doubt: true, .. })
        {
            report.divergence = Some(Divergence {
                seq: *seq,
                recorded: Some(parts(event)),
                decided: None,
                explanation: "the current code stops before this step (it waits for input here)"
                    .into(),
            });
            return Ok(report);
        }
        report.decisions += 1;
        let decided = match decide(&state, deciders.at(*seq), input, rules) {
            Ok(decision) => decision.events,
            Err(refusal) => {
                report.divergence = Some(Divergence {
                    seq: *seq,
                    recorded: Some(parts(event)),
                    decided: None,
                    explanation: format!("the current code refuses this input ({refusal:?})"),
                });
                return Ok(report);
            }
        };
        if decided.is_empty() {
            report.divergence = Some(Divergence {
                seq: *seq,
                recorded: Some(parts(event)),
                decided: None,
                explanation: "the current code takes no step here".into(),
            });
            return Ok(report);
        }
        let mut consumed = 0;
        for (k, ours) in decided.iter().enumerate() {
            match typed_events.get(i + k) {
                None => {
                    report.divergence = Some(Divergence {
                        seq: state.last_seq + 1 + k as i64,
                        recorded: None,
                        decided: Some(parts(ours)),
                        explanation: "the journal ends here; the current code decides more".into(),
                    });
                    return Ok(report);
                }
                // A fork's copy may end inside a decision.
                Some((_, SessionEvent::SessionForked { .. })) if k > 0 => break,
                Some((rseq, recorded)) if recorded != ours => {
                    report.divergence = Some(Divergence {
                        seq: *rseq,
                        recorded: Some(parts(recorded)),
                        decided: Some(parts(ours)),
                        explanation: "the current code decides another step".into(),
                    });
                    return Ok(report);
                }
                Some(_) => consumed += 1,
            }
        }
        for (seq, event) in &typed_events[i..i + consumed] {
            state.apply(*seq, event);
        }
        i += consumed;
    }
    Ok(report)
}

#[cfg(test)]
mod tests;

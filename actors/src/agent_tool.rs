//! The built-in `agent` tool kind (sub-agents; docs/design/subagents-notes.md): a call starts a
//! **child session** of another agent whose first user message is the call's task, and the
//! child's final reply is the call's result.
//!
//! Exactly once: the child's id is derived from the parent's session and call id, so starting
//! it again (a recovery, a retry) finds the same child; its journal begins with
//! `session_created` (naming the parent) and the task in one append at seq 1. The result
//! travels through the database: when the child's turn ends its actor writes a due-index row
//! for the parent (`child:{call_id}`), the scheduler wakes the parent on whichever node, and the
//! parent reads the child's journal and decides the call's result — refused as stale when the
//! call is no longer running, so a second wake-up delivers nothing twice.

use async_trait::async_trait;
use serde_json::{json, Value};
use stead_model::CallId;
use stead_persistence::{Error, NewEvent, NewSession, ParentLink, SessionStore};
use uuid::Uuid;

use crate::agent_schedules::{derived_id, wake_now};
use crate::events::{ParentRef, SessionEvent, TurnEnd};
use crate::schedule_tool::Builtin;
use crate::state::{CallStatus, SessionState};
use crate::tools::{Tool, ToolContext, ToolError, ToolInfo};

/// The due-index key of a child's "your parent's call was cancelled" wake-up.
pub const PARENT_CANCEL_KEY: &str = "cancel:parent";

/// The due-index key prefix of a parent's "a child ended" wake-up.
pub const CHILD_KEY_PREFIX: &str = "child:";

/// The parent's call whose child a due-index key names, if it is such a key.
pub fn child_call(key: &str) -> Option<&str> {
    key.strip_prefix(CHILD_KEY_PREFIX)
}

/// An `agent` tool: its calls start child sessions of `agent`.
pub struct AgentTool {
    pub info: ToolInfo,
    pub agent: String,
    /// The arguments' schema (default `{"task": string}`).
    pub parameters: Value,
}

impl AgentTool {
    /// The default arguments: one task in words.
    pub fn default_parameters() -> Value {
        json!({
            "type": "object",
            "properties": {
                "task": { "type": "string", "description": "what the agent is asked to do" }
            },
            "required": ["task"],
            "additionalProperties": false
        })
    }
}

#[async_trait]
impl Tool for AgentTool {
    // Starting the child again finds the same child.
    crate::tool_info_accessors!(idempotent = true);
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    fn builtin(&self) -> Option<Builtin> {
        Some(Builtin::Agent {
            agent: self.agent.clone(),
        })
    }
    async fn execute(&self, _arguments: Value, _context: &ToolContext) -> Result<Value, ToolError> {
        Err(ToolError(
            "an agent tool starts a child session; it is not an outside call".into(),
        ))
    }
}

/// The id of the child session a call starts: a UUIDv8 from SHA-256 of the parent's id and
/// the call id (the parent's idempotency key).
pub fn child_session_id(parent: Uuid, call_id: &str) -> Uuid {
    derived_id(&format!("stead:child\n{parent}\n{call_id}"))
}

/// The child's first message: the call's `task`, or its arguments as JSON when it has none.
pub fn child_task(arguments: &Value) -> String {
    match arguments.get("task").and_then(Value::as_str) {
        Some(task) => task.to_string(),
        None => arguments.to_string(),
    }
}

/// Creates the child session of `link`'s call (if it does not exist) with its first message,
/// and a due-index row that wakes it. Every step finds its effect in place when repeated. The
/// child keeps the parent's `metadata`, so its model calls are reported with the parent's
/// (per-customer spend covers the whole tree).
pub async fn start_child(
    store: &dyn SessionStore,
    parent: Uuid,
    link: ParentRef,
    principal: &str,
    agent: &str,
    task: String,
    metadata: Value,
) -> Result<Uuid, Error> {
    let call_id = link.call_id.as_str();
    let child = child_session_id(parent, call_id);
    let created = store
        .create_session(NewSession {
            // The store puts a child in its parent's project.
            project_id: stead_persistence::DEFAULT_PROJECT,
            id: Some(child),
            agent: agent.to_string(),
            metadata,
            parent: Some(ParentLink {
                session_id: parent,
                call_id: CallId::new(call_id.to_string()),
            }),
        })
        .await;
    if let Err(error) = created {
        // An earlier try made it.
        if store.get_session(child).await.is_err() {
            return Err(error);
        }
    }
    let events = [
        SessionEvent::SessionCreated {
            agent: agent.to_string(),
            principal: Some(principal.to_string()),
            parent: Some(link.clone()),
        },
        SessionEvent::UserMessage {
            text: task,
            client_id: Some(format!("parent:{call_id}")),
            mode: None,
            schedule: None,
            attachments: Vec::new(),
        },
    ]
    .iter()
    .map(|e| {
        let (kind, payload) = e.to_parts();
        NewEvent::new(kind, payload)
    })
    .collect();
    match store.append(child, 0, events).await {
        Ok(_) | Err(Error::Conflict { .. }) => {}
        Err(error) => return Err(error),
    }
    // Its activation starts the turn; the row only wakes it (and is mended away after).
    let row = wake_now(child, "start".into(), agent, json!({"kind": "child_start"}));
    store.put_schedules(&[row]).await?;
    Ok(child)
}

/// Why a child session gave its `agent` call no answer; the parent's model reads it as the
/// tool's error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChildFailure {
    #[error("the child session {child} failed: {reason}")]
    Failed { child: Uuid, reason: String },
    #[error("the child session {0} was closed")]
    Closed(Uuid),
    #[error("the child session {0} stopped at its agent's max_steps without an answer")]
    MaxSteps(Uuid),
    #[error("the child session {child}'s model call failed: {error}")]
    ModelFailed { child: Uuid, error: String },
    #[error("the child session {child}'s turn was cancelled: {reason}")]
    Cancelled { child: Uuid, reason: String },
}

/// What a child's journal says of the call that started it: `None` while its turn runs; else
/// the call's result (`{"reply", "child_session_id"}`) or why there is none.
pub fn child_outcome(child: Uuid, events: &[SessionEvent]) -> Option<Result<Value, ChildFailure>> {
    let mut state = SessionState::default();
    for (i, event) in events.iter().enumerate() {
        state.apply(i as i64 + 1, event);
    }
    if let Some(reason) = &state.failed {
        return Some(Err(ChildFailure::Failed {
            child,
            reason: reason.clone(),
        }));
    }
    if state.closed {
        return Some(Err(ChildFailure::Closed(child)));
    }
    if state.turn.is_some() || events.len() < 2 {
        return None;
    }
    let end = events.iter().rev().find_map(|e| match e {
        SessionEvent::TurnFinished { reason } => Some(Ok(*reason)),
        SessionEvent::TurnCancelled { reason } => Some(Err(reason.clone())),
        _ => None,
    })?;
    Some(match end {
        Ok(TurnEnd::Completed) => {
            let reply = events.iter().rev().find_map(|e| match e {
                SessionEvent::AssistantMessage { text, .. } => Some(text.clone()),
                _ => None,
            });
            Ok(json!({ "reply": reply.unwrap_or_default(), "child_session_id": child }))
        }
        Ok(TurnEnd::MaxSteps) => Err(ChildFailure::MaxSteps(child)),
        Ok(TurnEnd::ModelFailed) => {
            let error = events.iter().rev().find_map(|e| match e {
                SessionEvent::ModelCallFailed { error, .. } => Some(error.as_str()),
                _ => None,
            });
            Err(ChildFailure::ModelFailed {
                child,
                error: error.unwrap_or("no reason recorded").to_string(),
            })
        }
        Err(reason) => Err(ChildFailure::Cancelled { child, reason }),
    })
}

/// Whether the call `call_id` of `state` still waits for its child.
pub fn waits_for_child(state: &SessionState, call_id: &str) -> bool {
    state.children.contains_key(call_id)
        && state
            .turn
            .as_ref()
            .and_then(|t| t.call(call_id))
            .is_some_and(|c| matches!(c.status, CallStatus::Started { .. }))
}

/// What a child's decision did, in a line for its parent's `tool_progress` (`None`: nothing a
/// person follows — the last such event of the decision counts).
pub fn progress_line(events: &[SessionEvent]) -> Option<String> {
    events.iter().rev().find_map(|event| match event {
        SessionEvent::AssistantMessage { text, .. } => Some(clip(text)),
        SessionEvent::ApprovalRequested { tool, .. } => {
            Some(format!("awaiting approval of {tool}"))
        }
        SessionEvent::GuardrailChecked {
            tool,
            held: Some(_),
            ..
        } => Some(format!("awaiting approval of {tool}'s result")),
        SessionEvent::BudgetApprovalRequested { budget, .. } => Some(format!(
            "awaiting a budget approval: the budget of {budget} is spent"
        )),
        SessionEvent::ToolCallStarted { tool, .. } => Some(format!("calling {tool}")),
        SessionEvent::ToolCallFinished { tool, .. } => Some(format!("{tool} finished")),
        SessionEvent::ToolCallFailed { tool, .. } => Some(format!("{tool} failed")),
        SessionEvent::ModelCallStarted { .. } => Some("thinking".into()),
        SessionEvent::TurnCancelled { reason } => Some(format!("cancelled: {}", clip(reason))),
        SessionEvent::SessionFailed { reason } => Some(format!("failed: {}", clip(reason))),
        _ => None,
    })
}

/// At most 200 characters of `text`, on one line.
fn clip(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_id_is_the_parents_call_and_its_outcome_is_its_last_turn() {
        let parent = Uuid::now_v7();
        assert_eq!(
            child_session_id(parent, "t1"),
            child_session_id(parent, "t1")
        );
        assert_ne!(
            child_session_id(parent, "t1"),
            child_session_id(parent, "t2")
        );
        assert_eq!(child_task(&json!({"task": "look"})), "look");
        assert_eq!(child_task(&json!({"q": 1})), r#"{"q":1}"#);
        let child = child_session_id(parent, "t1");
        let mut events = vec![
            SessionEvent::SessionCreated {
                agent: "researcher".into(),
                principal: None,
                parent: None,
            },
            SessionEvent::UserMessage {
                text: "look".into(),
                client_id: None,
                mode: None,
                schedule: None,
                attachments: Vec::new(),
            },
            SessionEvent::ModelCallStarted {
                call_id: "m1".into(),
                route: "r".into(),
                model: "m".into(),
            },
        ];
        assert_eq!(child_outcome(child, &events), None);
        events.push(SessionEvent::AssistantMessage {
            text: "Found it.".into(),
            fallback: false,
        });
        events.push(SessionEvent::TurnFinished {
            reason: TurnEnd::Completed,
        });
        assert_eq!(
            child_outcome(child, &events),
            Some(Ok(json!({"reply": "Found it.", "child_session_id": child})))
        );
        events.push(SessionEvent::SessionFailed {
            reason: "crashed".into(),
        });
        assert!(child_outcome(child, &events)
            .unwrap()
            .unwrap_err()
            .to_string()
            .contains("failed: crashed"));
    }
}

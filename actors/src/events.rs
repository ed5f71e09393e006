//! The journal's event kinds (docs/sessions.md) as one typed enum, so the fold and the
//! decisions never handle untyped JSON. `kind` is the journal's `kind` column, the rest its
//! `payload`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use stead_model::{CallId, Decider};
use ts_rs::TS;

/// A tool of a dynamic source (an MCP server) as the model saw it: `tools_seen` journals the
/// list, so the decisions and the decision check use the list the model was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct SeenTool {
    /// The name the model sees (`{server}__{tool}`).
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments.
    #[ts(type = "unknown")]
    pub parameters: Value,
}

/// A file a user message carries: an artifact of the store, named by reference — a journal
/// never holds the bytes (docs/artifacts.md, "Attachments").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct Attachment {
    #[ts(type = "string")]
    pub artifact_id: uuid::Uuid,
    /// As read from the bytes when it was uploaded.
    pub content_type: String,
    #[ts(type = "number")]
    pub size: i64,
    /// Lowercase hex SHA-256 of the bytes: the blob's name.
    pub sha256: String,
}

impl Attachment {
    /// Whether the models that see images are shown it as one.
    pub fn is_image(&self) -> bool {
        stead_model::chat::IMAGE_TYPES.contains(&self.content_type.as_str())
    }
}

/// A tool call as the model asked for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct RequestedCall {
    pub call_id: CallId,
    pub tool: String,
    #[ts(type = "unknown")]
    pub arguments: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, TS)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// What a user message does when it arrives while a turn runs (docs/sessions.md): `queue` waits
/// for the turn to end; `interrupt` cancels the turn (its model call aborted, its running tools
/// cancelled) and starts a new one with this message ahead of any queued; `steer` joins the
/// running turn before its next model call; `drop_if_busy` is refused (409 `busy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum MessageMode {
    #[default]
    Queue,
    Interrupt,
    Steer,
    DropIfBusy,
}

impl MessageMode {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageMode::Queue => "queue",
            MessageMode::Interrupt => "interrupt",
            MessageMode::Steer => "steer",
            MessageMode::DropIfBusy => "drop_if_busy",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            MessageMode::Queue,
            MessageMode::Interrupt,
            MessageMode::Steer,
            MessageMode::DropIfBusy,
        ]
        .into_iter()
        .find(|m| m.as_str() == text)
    }
}

/// Whether an approval covers this call only or the tool for the rest of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalScope {
    Once,
    Session,
}

/// Why a turn ended by itself (`turn_finished`'s `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum TurnEnd {
    /// The model answered without calling a tool.
    Completed,
    /// The model call failed (after the router's retries and fallback).
    ModelFailed,
    /// The agent's `max_steps` model calls were spent.
    MaxSteps,
}

impl TurnEnd {
    /// The `reason` as journaled.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnEnd::Completed => "completed",
            TurnEnd::ModelFailed => "model_failed",
            TurnEnd::MaxSteps => "max_steps",
        }
    }
}

impl PartialEq<str> for TurnEnd {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for TurnEnd {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// How an approval ended, as its `approval_decided` event tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalOutcome {
    Approved,
    Rejected,
    /// Nobody decided within the agent's `approval_timeout_secs`: rejected by Stead.
    Expired,
}

impl ApprovalOutcome {
    /// The `reason` an expiry is journaled with.
    pub const EXPIRED_REASON: &'static str = "expired";

    /// The outcome of a decision with these fields.
    pub fn of(approved: bool, reason: Option<&str>, decided_by: &Decider) -> Self {
        match (approved, reason) {
            (true, _) => ApprovalOutcome::Approved,
            (false, Some(Self::EXPIRED_REASON)) if *decided_by == Decider::System => {
                ApprovalOutcome::Expired
            }
            (false, _) => ApprovalOutcome::Rejected,
        }
    }
}

/// The session and tool call that started a child session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct ParentRef {
    pub session_id: String,
    pub call_id: CallId,
    /// The child's depth: 1 for a child of a top-level session (absent in older journals: 1).
    #[serde(default = "first_level")]
    pub depth: u32,
    /// The delegation this child belongs to: the child session of a top-level session's call
    /// that it descends from (absent at depth 1: the child itself). Its row counts the
    /// delegation's model calls (`sessions.max_delegation_steps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub delegation: Option<String>,
    /// The top-level session's message this child descends from: all its descendants share
    /// one budget of model calls and child sessions (`sessions.max_delegation_steps`,
    /// `sessions.max_delegation_sessions`; absent in journals from before it: the
    /// `delegation`'s own count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub message: Option<RootMessage>,
}

/// A top-level session's message, by the seq at which its turn started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct RootMessage {
    pub session_id: String,
    pub turn_seq: i64,
}

fn first_level() -> u32 {
    1
}

/// What a `context_compacted` event records: the oldest `entries` of the transcript — `turns`
/// whole turns — left the prompt of the model call `call_id` (in flight), replaced by `summary`
/// (written by `model`; `None` with the `truncate` strategy or when the summariser failed).
/// The fold drops them; later prompts show the summary after the system prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Compaction {
    pub call_id: CallId,
    pub entries: u64,
    pub turns: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub model: Option<String>,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

/// One journaled step of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "kind", content = "payload", rename_all = "snake_case")]
pub enum SessionEvent {
    SessionCreated {
        agent: String,
        /// Who created the session, as the model router's limits and budgets name callers: an
        /// API key's fingerprint or `local`. Every model call of the session is charged to it
        /// (`null` in journals written before it existed: charged as `local`).
        #[serde(default)]
        principal: Option<String>,
        /// Set on a child session (sub-agents): the session and tool call that started it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        parent: Option<ParentRef>,
    },
    UserMessage {
        text: String,
        client_id: Option<String>,
        /// Set when the message arrived during a turn and interrupted or steered it (absent:
        /// it started a turn, or was queued behind the running one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        mode: Option<MessageMode>,
        /// The key of the schedule whose firing delivered this message (absent: a person or
        /// client sent it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        schedule: Option<String>,
        /// Files the message carries, by reference (docs/artifacts.md, "Attachments").
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[ts(optional, as = "Option<Vec<Attachment>>")]
        attachments: Vec<Attachment>,
    },
    ModelCallStarted {
        call_id: CallId,
        route: String,
        model: String,
    },
    ModelCallFinished {
        call_id: CallId,
        text: String,
        tool_calls: Vec<RequestedCall>,
        usage: Usage,
        provider: String,
        model: String,
        latency_ms: f64,
        ttft_ms: f64,
        cost: f64,
        /// The route's guardrails that acted on the call — its request and this answer — with
        /// what they did and the entities they found, never the text (docs/guardrails.md).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[ts(optional, as = "Option<Vec<stead_model::log::GuardrailEntry>>")]
        guardrails: Vec<stead_model::log::GuardrailEntry>,
    },
    ModelCallFailed {
        call_id: CallId,
        error: String,
    },
    ToolCallRequested {
        call_id: CallId,
        tool: String,
        #[ts(type = "unknown")]
        arguments: Value,
    },
    ApprovalRequested {
        call_id: CallId,
        tool: String,
        #[ts(type = "unknown")]
        arguments: Value,
        args_hash: String,
        reason: String,
    },
    ApprovalDecided {
        call_id: CallId,
        approved: bool,
        reason: Option<String>,
        #[ts(type = "string")]
        decided_by: Decider,
        scope: ApprovalScope,
    },
    /// A key's or a project's budget refused the model call `call_id` (docs/tenancy.md,
    /// "Budget approvals"): the turn waits for the project's admin or the installation, with
    /// the call still the turn's; `needed_usd` is how far over the budget the call would go.
    BudgetApprovalRequested {
        call_id: CallId,
        budget: String,
        needed_usd: f64,
        reason: String,
    },
    /// A decision on a budget approval: approved, the model call is made again, allowed
    /// `overspend_usd` past each of its budgets; rejected, it fails with the reason.
    BudgetApprovalDecided {
        call_id: CallId,
        approved: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        overspend_usd: Option<f64>,
        reason: Option<String>,
        #[ts(type = "string")]
        decided_by: Decider,
    },
    ToolCallStarted {
        call_id: CallId,
        tool: String,
        idempotency_key: String,
    },
    ToolCallFinished {
        call_id: CallId,
        tool: String,
        #[ts(type = "unknown")]
        result: Value,
    },
    /// The agent's guardrails checked the result of `call_id` before the model saw it
    /// (docs/guardrails.md, "Tool results"): each one's verdict, in order. The outcome follows:
    /// `tool_call_finished` with the result as they left it, `tool_call_failed` naming a
    /// guardrail that blocked it, or — `held` set — nothing until a person decides on the
    /// held result (`approval_decided`).
    GuardrailChecked {
        call_id: CallId,
        tool: String,
        checks: Vec<stead_guardrails::results::GuardrailCheck>,
        /// The result an `approve` guardrail holds for a person.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional, type = "unknown")]
        held: Option<Value>,
    },
    ToolCallFailed {
        call_id: CallId,
        tool: String,
        error: String,
        /// The call may or may not have taken effect (started, not finished, not idempotent).
        #[serde(default)]
        in_doubt: bool,
    },
    /// A started call was cancelled (the turn was cancelled or the session closed or failed
    /// while it ran): the tool was told to stop (MCP: `notifications/cancelled`), and whatever
    /// it answers later is dropped. Interrupts and cascading cancels use this event too.
    ToolCallCancelled {
        call_id: CallId,
        tool: String,
        reason: String,
    },
    /// The dynamic tools (MCP) the agent offers from here on, journaled before the model call
    /// that first sees them; `digest` is `sha256:` of the list's canonical JSON. Static tools
    /// come from the configuration and are not listed.
    ToolsSeen {
        digest: String,
        tools: Vec<SeenTool>,
    },
    /// The turn's reply. `fallback`: the model gave nothing usable (see `reply_rejected`), so
    /// Stead built this reply from the turn's tool results (docs/sessions.md, "Replies").
    AssistantMessage {
        text: String,
        #[serde(default, skip_serializing_if = "is_false")]
        #[ts(optional, as = "Option<bool>")]
        fallback: bool,
    },
    /// Before the model call it names (in flight) was sent, its prompt would have outgrown the
    /// agent's budget: the oldest turns were replaced by a summary, or dropped (docs/sessions.md,
    /// "Context management").
    ContextCompacted(Compaction),
    /// The session's pinned memory block is now `text` (docs/sessions.md, "Memory block"),
    /// edited `by` its agent's memory tool (`agent:{call_id}`) or an operator.
    MemoryUpdated {
        text: String,
        by: String,
    },
    /// The model's answer `call_id` had no tool calls, but its text cannot be a reply (empty,
    /// or tool-call text): it is dropped from the transcript, and the turn asks the model once
    /// more without tools (a repair call) or builds the reply from its tool results.
    ReplyRejected {
        call_id: CallId,
        reason: String,
    },
    TurnFinished {
        reason: TurnEnd,
    },
    TurnCancelled {
        reason: String,
    },
    /// The session's actor kept crashing; the session accepts no more input.
    SessionFailed {
        reason: String,
    },
    /// Closed by a user; the journal is kept and stays readable.
    SessionClosed {
        reason: String,
    },
    /// A schedule was created (or replaced: same key, new definition). `next_due_at` is its
    /// first occurrence.
    ScheduleCreated {
        key: String,
        schedule: crate::schedules::ScheduleDef,
        #[ts(type = "string")]
        created_at: chrono::DateTime<chrono::Utc>,
        #[ts(type = "string | null")]
        next_due_at: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// The occurrence due at `due_at` fired at `at`; the `user_message` it delivers follows.
    /// `missed`: later occurrences folded into this one (`catch_up = "one"`) or skipped.
    ScheduleFired {
        key: String,
        #[ts(type = "string")]
        due_at: chrono::DateTime<chrono::Utc>,
        #[ts(type = "string")]
        at: chrono::DateTime<chrono::Utc>,
        /// `null`: the schedule is done.
        #[ts(type = "string | null")]
        next_due_at: Option<chrono::DateTime<chrono::Utc>>,
        #[serde(default, skip_serializing_if = "is_zero")]
        #[ts(type = "number | undefined")]
        missed: u64,
    },
    /// Occurrences too late to fire under `catch_up = "skip"` were dropped at `at`.
    ScheduleSkipped {
        key: String,
        #[ts(type = "string")]
        at: chrono::DateTime<chrono::Utc>,
        missed: u64,
        #[ts(type = "string | null")]
        next_due_at: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// A schedule was cancelled: by a request, by the agent's tool, or because the session
    /// closed or failed.
    ScheduleCancelled {
        key: String,
        reason: String,
    },
    /// A call of an `agent` tool started its child session (which delivers the call's result).
    ChildSessionStarted {
        call_id: CallId,
        child_session_id: String,
    },
    /// This session's journal up to here is a copy of `from`'s up to `at`; later model calls
    /// use the overrides.
    SessionForked {
        from: String,
        at: i64,
        #[serde(default)]
        overrides: Overrides,
        /// Who forked: the fork's model calls are charged to it from here on.
        #[serde(default)]
        principal: Option<String>,
    },
}

/// What a fork changes for the model calls after it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct Overrides {
    /// Another route (what `/v1/chat/completions` calls `model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl SessionEvent {
    /// The journal's `kind` and `payload` columns.
    pub fn to_parts(&self) -> (String, Value) {
        // Every variant serializes: string keys, no custom serializer that can fail.
        #[allow(clippy::expect_used)]
        let mut value = serde_json::to_value(self).expect("session events serialize");
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        let payload = value
            .get_mut("payload")
            .map(Value::take)
            .unwrap_or(Value::Object(Default::default()));
        (kind, payload)
    }

    /// Reads a journaled event back. Unknown kinds (from a newer Stead) are `None`.
    pub fn from_parts(kind: &str, payload: &Value) -> Option<Self> {
        serde_json::from_value(serde_json::json!({ "kind": kind, "payload": payload })).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_and_payloads_match_the_spec() {
        let event = SessionEvent::UserMessage {
            text: "hi".into(),
            client_id: None,
            mode: None,
            schedule: None,
            attachments: Vec::new(),
        };
        let (kind, payload) = event.to_parts();
        assert_eq!(kind, "user_message");
        assert_eq!(payload, json!({ "text": "hi", "client_id": null }));
        assert_eq!(SessionEvent::from_parts(&kind, &payload), Some(event));

        let decided = SessionEvent::ApprovalDecided {
            call_id: "c1".into(),
            approved: false,
            reason: Some("no".into()),
            decided_by: "ada".into(),
            scope: ApprovalScope::Once,
        };
        let (kind, payload) = decided.to_parts();
        assert_eq!(kind, "approval_decided");
        assert_eq!(payload["scope"], json!("once"));
        assert_eq!(SessionEvent::from_parts("no_such_kind", &payload), None);
    }
}

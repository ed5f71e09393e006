//! What goes into a decision and what comes out: the inputs a session receives ([`Input`],
//! with a model's answer as [`ModelOutput`]), the refusals that journal nothing (`crate::refusal`),
//! and a [`Decision`]'s events, actions and status (`decide.rs` makes them).

use serde_json::Value;
use stead_model::{CallId, Decider};
use stead_persistence::SessionStatus;

use crate::events::{ApprovalScope, MessageMode, SeenTool, SessionEvent, Usage};

/// What a model call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOutput {
    pub text: String,
    /// `(tool, arguments)` in the model's order.
    pub tool_calls: Vec<(String, Value)>,
    pub usage: Usage,
    pub provider: String,
    pub model: String,
    pub latency_ms: f64,
    pub ttft_ms: f64,
    pub cost: f64,
    /// The route's guardrails that acted on the call (journaled with its answer).
    pub guardrails: Vec<stead_model::log::GuardrailEntry>,
}

/// Something that happened to the session.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    UserMessage {
        text: String,
        client_id: Option<String>,
        /// What to do if a turn runs (`None`: the agent's `message_mode`).
        mode: Option<MessageMode>,
        /// Files it carries, each an artifact of the session checked by the edge.
        attachments: Vec<crate::events::Attachment>,
    },
    ModelFinished {
        call_id: CallId,
        output: ModelOutput,
    },
    ModelFailed {
        call_id: CallId,
        error: String,
    },
    /// A key's or a project's budget refused the model call in flight: the turn parks on a
    /// budget approval.
    ModelBudgetExceeded {
        call_id: CallId,
        refusal: BudgetRefusal,
    },
    ToolFinished {
        call_id: CallId,
        result: Value,
    },
    ToolFailed {
        call_id: CallId,
        error: String,
    },
    /// A tool's result after the agent's guardrails (docs/guardrails.md, "Tool results"):
    /// `result` as they left it (redacted), `checks` their verdicts, in order.
    ToolChecked {
        call_id: CallId,
        result: Value,
        checks: Vec<stead_guardrails::results::GuardrailCheck>,
    },
    Decision {
        call_id: CallId,
        approved: bool,
        reason: Option<String>,
        decided_by: Decider,
        scope: ApprovalScope,
        /// When given, must match the hash in `approval_requested`.
        args_hash: Option<String>,
        /// On a budget approval: the overspend allowed (USD; the shortfall it was parked on
        /// when not given). Refused on a tool call's approval.
        overspend_usd: Option<f64>,
        /// Whether the decider may allow spending (the installation, a project's admin): a
        /// budget approval refuses everyone else's decision.
        may_spend: bool,
    },
    Cancel {
        reason: String,
    },
    /// The approval's time ran out (see `AgentRules::approval_timeout`).
    ApprovalExpired {
        call_id: CallId,
    },
    /// The actor was (re)activated from the journal: resume whatever was in flight.
    Recover,
    /// The agent's dynamic (MCP) tools are not the list the session last journaled: the actor
    /// sends this before a model call, so the call sees (and the journal holds) the new list.
    ToolsChanged {
        digest: String,
        tools: Vec<SeenTool>,
    },
    /// The prompt of the model call it names (in flight) outgrew its budget: drop the oldest
    /// turns, replaced by the summary — the actor measured and summarised before sending the
    /// call (docs/sessions.md, "Context management").
    Compact(crate::events::Compaction),
    /// Set the pinned memory block to `text` (an operator's edit, or — in the decision check —
    /// the recorded edit of a memory tool call).
    SetMemory {
        text: String,
        by: String,
    },
    /// The supervisor gives up on the session (its actor kept crashing).
    Fail {
        reason: String,
    },
    /// Create (or, with `replace`, redefine) the schedule `key`, at the instant `now`.
    CreateSchedule {
        key: String,
        /// Boxed: a definition is large, and inputs travel in every actor message.
        def: Box<crate::schedules::ScheduleDef>,
        replace: bool,
        now: chrono::DateTime<chrono::Utc>,
    },
    CancelSchedule {
        key: String,
        reason: String,
    },
    /// Run the started call `call_id` of a built-in tool (`schedule_tool`) at `now`: the
    /// actor sends it in place of running the tool outside.
    RunBuiltin {
        call_id: CallId,
        now: chrono::DateTime<chrono::Utc>,
    },
    /// The child session of the running `agent` call `call_id` exists (the actor started it).
    ChildStarted {
        call_id: CallId,
        child_session_id: String,
    },
    /// The child of `call_id` ended its turn (its due-index row woke this session): the actor
    /// reads the child's journal and sends the call's result or error instead.
    ChildFinished {
        call_id: CallId,
    },
    /// Fire the schedules due at `now` (the scheduler sends it when the due index says so).
    SchedulesDue {
        now: chrono::DateTime<chrono::Utc>,
    },
    /// A user closes the session: the turn in flight stops, the journal is kept.
    Close {
        reason: String,
    },
}

/// Why a budget refused a model call, as the model client reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetRefusal {
    /// The budget's name (``key `ci` ``).
    pub budget: String,
    /// How far over the budget the call would go (USD).
    pub needed_usd: f64,
    /// The refusal as the router worded it.
    pub message: String,
}

/// Work to do after the decision's events are committed.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    CallModel {
        call_id: CallId,
    },
    RunTool {
        call_id: CallId,
        tool: String,
        arguments: Value,
        idempotency_key: String,
    },
    AbortModelCall {
        call_id: CallId,
    },
    /// Tell a running tool to stop (its call was journaled as cancelled).
    AbortTool {
        call_id: CallId,
    },
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    pub events: Vec<SessionEvent>,
    pub actions: Vec<Action>,
    /// The session's status once the events are committed (`None` when there are none), so
    /// the store can write it in the same transaction.
    pub status: Option<SessionStatus>,
}

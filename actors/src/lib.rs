//! `stead-actors` owns the session as a durable object: the agent loop written as pure
//! decisions over the journal (`decide`), the fold that rebuilds a session's state from its
//! events (`state`), the approval policies (`policy`), the session actor with its registry and
//! supervisor (`session`), and the tools (`tools`, and the built-in `schedule_tool` the session
//! runs inside its decisions). It talks to storage through the store
//! traits of `stead-persistence` and to models through its own `ModelClient` trait; it never
//! names sqlx, ort or router types. `replay` turns recorded journals into a debugging tool:
//! state at a seq, forks, export and import, the decision check, and compaction.

pub mod agent_schedules;
pub mod agent_tool;
pub mod context;
pub mod decide;
pub mod events;
pub mod inputs;
pub mod memory_block;
pub mod policy;
pub mod refusal;
pub mod replay;
pub mod reply;
pub mod rules;
pub mod schedule_tool;
pub mod schedules;
pub mod session;
pub mod state;
pub mod tools;

pub use decide::{
    decide, Action, AgentRules, Decision, DynamicToolRule, Input, ModelOutput, Refusal, ToolRules,
};
pub use events::{
    ApprovalOutcome, ApprovalScope, Attachment, MessageMode, Overrides, RequestedCall, SeenTool,
    SessionEvent, TurnEnd, Usage,
};
pub use inputs::BudgetRefusal;
pub use policy::{args_hash, ApprovalPolicy, Approver, ArgumentSchema, PolicyError};
pub use rules::{
    Delegation, DEFAULT_MAX_DELEGATION_SESSIONS, DEFAULT_MAX_DELEGATION_STEPS, DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_FANOUT,
};
pub use schedules::{CatchUp, ScheduleDef, ScheduleLimits, ScheduleMessage, ScheduleState};
pub use state::{
    BudgetWait, CallState, CallStatus, SessionState, Transcript, TranscriptEntry, Turn,
    LOCAL_PRINCIPAL,
};
pub use stead_model::{CallId, Decider, Epoch};

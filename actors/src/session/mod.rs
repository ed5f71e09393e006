//! The session actor — the durable object. One ractor actor per live session owns its folded
//! state; every input goes through `decide`, its events are appended to the journal (fenced by
//! the last seq the actor folded), folded, broadcast, and only then are its actions started.
//! Model and tool calls run as tasks that report back to the actor as messages, so the actor
//! never blocks: a session parked on an approval holds no task at all.

mod actor;
mod children;
mod compaction;
mod config;
mod due_index;
mod frames;
mod live;
mod model;
mod model_call;
mod registry;
mod scheduler;
mod supervisor;
mod tool_call;

use actor::StreamingCall;
pub use actor::{Caller, Live, SessionActor, SessionDeps, SessionError, SessionMsg};
pub use config::{Agent, AgentTools, Lifecycle, ResultGuard};
pub use due_index::{approval_call, APPROVAL_KEY_PREFIX};
pub use frames::{Attached, Frame, SharedFrame, Subscriber, Subscription};
pub use model::{
    estimate, prompt_chars, Calibration, ModelClient, ModelError, ModelRequest, PromptSize,
    ToolSpec,
};
pub use registry::{default_node_name, SessionRegistry};
pub use scheduler::{Clock, Scheduler, SchedulerOptions};

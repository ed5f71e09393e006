//! What subscribers receive: frames (committed events and streamed model text), where a
//! session stood when they attached, and both ends of a bounded subscription.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use stead_persistence::SessionStatus;

use crate::events::SessionEvent;
use crate::tools::ToolProgress;
use stead_model::CallId;

/// What subscribers receive, in commit order.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A committed event, with the timestamp the journal holds for it. Shared by every
    /// subscriber; `wire` caches its serialized form for the first consumer that makes one, so
    /// a broadcast to many clients serializes each event once.
    Event {
        seq: i64,
        event: Arc<SessionEvent>,
        at: chrono::DateTime<chrono::Utc>,
        wire: Arc<std::sync::OnceLock<String>>,
    },
    /// Streamed model text; `offset` is where `text` starts in the call's text (bytes), so a
    /// client that got some of the stream another way can skip what it has.
    Delta {
        call_id: CallId,
        /// Which run of the call this text belongs to: the activation's lease epoch. A call
        /// re-issued after a restart streams a new text under a higher attempt, which replaces
        /// the old partial text instead of continuing it.
        attempt: i64,
        text: String,
        offset: usize,
    },
    /// A running tool's latest progress (not journaled).
    Progress {
        call_id: CallId,
        progress: Arc<ToolProgress>,
    },
}

/// A frame as every subscriber's queue holds it: one allocation per broadcast, shared by all
/// of them (a stream delta's text is not copied per client), and 8 bytes a slot — each
/// queue's first block is 32 slots, allocated when it attaches (`stead bench ws`).
pub type SharedFrame = Arc<Frame>;

/// Where a session stood when a subscriber attached: everything after it arrives as frames.
#[derive(Debug, Clone, PartialEq)]
pub struct Attached {
    pub last_seq: i64,
    pub status: SessionStatus,
    /// The model call in flight and its text so far.
    pub streaming: Option<(CallId, String)>,
    /// The attempt (activation epoch) the in-flight call's text belongs to.
    pub attempt: i64,
    /// The latest progress of each tool call that runs.
    pub progress: Vec<(CallId, ToolProgress)>,
}

/// A subscriber's end: frames in order, bounded. A subscriber that falls `capacity` frames
/// behind is dropped (its channel closes and `lagged` is set) so it can never stall the session
/// or the other subscribers.
pub struct Subscription {
    pub frames: tokio::sync::mpsc::Receiver<SharedFrame>,
    pub attached: Attached,
    pub lagged: Arc<AtomicBool>,
}

/// The actor's side of a subscription.
pub struct Subscriber {
    pub(super) sender: tokio::sync::mpsc::Sender<SharedFrame>,
    pub(super) lagged: Arc<AtomicBool>,
}

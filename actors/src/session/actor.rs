//! The session actor itself: its messages, dependencies and live state, activation from the
//! latest snapshot and the journal, and the message loop (ticks, inputs, deltas, subscribers).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use stead_persistence::{SessionStatus, SessionStore};
use uuid::Uuid;

use super::{Agent, Attached, Frame, Lifecycle, ModelClient, Subscriber};
use crate::decide::{Input, Refusal};
use crate::events::SessionEvent;
use crate::state::SessionState;
use stead_model::CallId;

/// Why an input was not applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SessionError {
    #[error("refused: {0:?}")]
    Refused(Refusal),
    #[error("no such session")]
    NotFound,
    /// Another node's actor owns the session now (its lease is live).
    #[error("the session is active on {0}")]
    HeldElsewhere(String),
    /// The session's agent is not in the configuration any more.
    #[error("the session's agent `{0}` is not configured")]
    UnknownAgent(String),
    #[error("journal: {0}")]
    Journal(String),
    /// The database could not be used (full, down or failing): nothing of the input was
    /// applied, and the session carries on once the database works again.
    #[error("the database could not be used: {0}")]
    Storage(String),
    /// The actor is passivating: the input was not applied; send it again (the registry does,
    /// to a fresh activation).
    #[error("the session actor is passivating")]
    Passivating,
    /// The actor took the request and stopped before answering: whether it was applied is
    /// unknown (the journal tells).
    #[error("the session actor stopped")]
    Stopped,
    /// Every activation tried was passivating; nothing was applied.
    #[error("the session actor kept passivating")]
    KeptPassivating,
    /// An event would be over the journal's size limit; nothing was written.
    #[error("{0}")]
    TooLarge(String),
}

impl From<stead_persistence::Error> for SessionError {
    /// A store error as the session's caller sees it: a missing session is `NotFound`; a
    /// database that is down, full or failing is `Storage` (nothing was applied; send again);
    /// anything else is `Journal`.
    fn from(error: stead_persistence::Error) -> Self {
        match error {
            stead_persistence::Error::SessionNotFound(_) => SessionError::NotFound,
            other if !other.is_permanent() => SessionError::Storage(other.to_string()),
            other => SessionError::Journal(other.to_string()),
        }
    }
}

/// The model call in flight: its id, the flag that cancels it, and the text streamed so far
/// (a subscriber that attaches mid-stream starts from it).
pub(super) struct StreamingCall {
    pub(super) call_id: CallId,
    pub(super) cancel: tokio_util::sync::CancellationToken,
    pub(super) text: String,
}

pub enum SessionMsg {
    /// An input, with its caller when one waits for the answer (the actor's own inputs — a
    /// task's outcome, a timer — have none).
    Input(Input, Option<Caller>),
    /// Periodic: passivate when idle.
    Tick,
    Delta {
        call_id: CallId,
        text: String,
    },
    /// A running tool's progress report.
    Progress {
        call_id: CallId,
        progress: crate::tools::ToolProgress,
    },
    Subscribe(Subscriber, RpcReplyPort<Attached>),
    State(RpcReplyPort<SessionState>),
}

/// The caller of an input: where its answer goes, and a mark the actor sets as it takes the
/// input. ractor drops whatever is queued behind a drain marker when the actor stops (a send can
/// pass the mailbox's status check just before passivation begins and land behind the marker),
/// and a stopped actor drops its whole mailbox; a caller whose answer never comes must know
/// whether its input was ever handled. Untaken, nothing of it was applied and it may be sent
/// again; taken, the actor ended mid-input and the outcome is unknown.
pub struct Caller {
    reply: RpcReplyPort<Result<i64, SessionError>>,
    taken: Arc<AtomicBool>,
}

impl Caller {
    /// A caller answering on `reply`; `taken` is set once the actor takes the input.
    pub fn new(reply: RpcReplyPort<Result<i64, SessionError>>, taken: Arc<AtomicBool>) -> Self {
        Self { reply, taken }
    }

    fn answer(self, answer: Result<i64, SessionError>) {
        let _ = self.reply.send(answer);
    }
}

pub struct SessionDeps {
    pub session_id: Uuid,
    /// The project the session belongs to: what its tools may reach (a knowledge tool reads
    /// this project's collections).
    pub project: Uuid,
    /// The lease this activation holds: every journal write is fenced by its epoch.
    pub lease: stead_persistence::Lease,
    pub agent: Arc<Agent>,
    pub store: Arc<dyn SessionStore>,
    pub model: Arc<dyn ModelClient>,
    pub lifecycle: Lifecycle,
    /// Told when the actor writes a due-index row, so the scheduler looks at it at once.
    pub due_changed: Arc<tokio::sync::Notify>,
    /// The registry's other live actors on this node (a child reports its progress to its
    /// parent's actor when that is live here).
    pub(super) peers: std::sync::Weak<super::registry::Shared>,
}

pub struct SessionActor;

pub struct Live {
    /// The last model call its provider counted (sharpens the next prompt's estimate on
    /// remote routes; model tasks update it).
    pub(super) calibration: Arc<std::sync::Mutex<Option<super::Calibration>>>,
    pub(super) deps: SessionDeps,
    pub(super) state: SessionState,
    pub(super) subscribers: Vec<Subscriber>,
    /// Model and tool tasks started and not yet reported back.
    pub(super) tasks_in_flight: usize,
    pub(super) last_activity: std::time::Instant,
    pub(super) last_snapshot: i64,
    /// Set while a snapshot is being written (off the actor's task; one at a time).
    pub(super) snapshot_writing: Arc<std::sync::atomic::AtomicBool>,
    /// The model call in flight.
    pub(super) streaming: Option<StreamingCall>,
    /// The placeholders the agent's guardrails gave in this activation's tool results, numbered
    /// on from the journal's (docs/guardrails.md, "Tool results").
    pub(super) placeholders: Arc<std::sync::Mutex<stead_guardrails::Placeholders>>,
    /// The status last written to the session's row (for listing and filtering).
    pub(super) synced_status: SessionStatus,
    /// The session's metadata, for its model calls' request-log rows.
    pub(super) metadata: serde_json::Map<String, serde_json::Value>,
    pub(super) lease_renewed: std::time::Instant,
    /// Set when the actor decided to passivate: it drains its mailbox without applying inputs.
    pub(super) passivating: bool,
    /// The `invoke_agent {agent}` span of the turn in progress (model and tool calls are its
    /// children); it ends when the session stops running (a turn's end, or parking).
    pub(super) turn_span: Option<tracing::Span>,
    /// Consecutive inputs of the actor's own tasks that could not be journaled (the backoff of
    /// their next try).
    pub(super) unwritten: u32,
    /// The tool calls that run, by call id: what cancels each.
    pub(super) running_tools:
        std::collections::HashMap<CallId, tokio_util::sync::CancellationToken>,
    /// The latest progress of the tool calls that run.
    pub(super) progress: std::collections::BTreeMap<CallId, crate::tools::ToolProgress>,
}

/// The first wait before an own input that could not be journaled is tried again; it doubles
/// up to [`UNWRITTEN_MAX_WAIT`].
const UNWRITTEN_FIRST_WAIT: std::time::Duration = std::time::Duration::from_millis(100);
const UNWRITTEN_MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

const READ_PAGE: u32 = 1000;

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = Live;
    type Arguments = SessionDeps;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        deps: SessionDeps,
    ) -> Result<Self::State, ActorProcessingErr> {
        // Activation: the latest snapshot, then the journal after it; then resume what was
        // in flight.
        let mut state = SessionState::default();
        if let Ok(Some(snapshot)) = deps.store.latest_snapshot(deps.session_id).await {
            if let Some(folded) = crate::replay::state_from_document(&snapshot.state) {
                state = folded;
            }
        }
        let last_snapshot = state.last_seq;
        let row = deps.store.get_session(deps.session_id).await?;
        let row_status = row.status;
        let metadata = match row.metadata {
            serde_json::Value::Object(map) => map,
            _ => Default::default(),
        };
        loop {
            let page = deps
                .store
                .read(deps.session_id, state.last_seq, READ_PAGE)
                .await?;
            let done = page.len() < READ_PAGE as usize;
            for event in page {
                match SessionEvent::from_parts(&event.kind, &event.payload) {
                    Some(typed) => state.apply(event.seq, &typed),
                    None => state.last_seq = event.seq,
                }
            }
            if done {
                break;
            }
        }
        myself.cast(SessionMsg::Input(Input::Recover, None))?;
        // Parked turns are checked at their own period, not a quarter of it: a live actor
        // ticks no more often than the lease needs (every 10 s by default), and a parked
        // session passivates between one and two `passivate_parked_after` after its last input.
        let every = (deps.lifecycle.passivate_after / 4)
            .min(deps.lifecycle.passivate_parked_after)
            .min(deps.lifecycle.lease_ttl / 3);
        let me = myself.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every.max(std::time::Duration::from_millis(5)));
            loop {
                tick.tick().await;
                if me.cast(SessionMsg::Tick).is_err() {
                    break; // the actor is gone
                }
            }
        });
        let placeholders = stead_guardrails::Placeholders::continuing(
            state
                .placeholders
                .iter()
                .map(|(entity, n)| (entity.clone(), *n)),
        );
        let mut live = Live {
            placeholders: Arc::new(std::sync::Mutex::new(placeholders)),
            deps,
            state,
            subscribers: Vec::new(),
            tasks_in_flight: 0,
            last_activity: std::time::Instant::now(),
            last_snapshot,
            snapshot_writing: Default::default(),
            streaming: None,
            synced_status: row_status,
            metadata,
            lease_renewed: std::time::Instant::now(),
            passivating: false,
            turn_span: None,
            unwritten: 0,
            running_tools: Default::default(),
            progress: Default::default(),
            calibration: Default::default(),
        };
        // The row's status follows the journal; a crash between the two is mended here.
        live.sync_status().await;
        live.sync_due_index().await;
        Ok(live)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        live: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Passivated, fenced or stopped: let another activation (here or on another node) take
        // the session at once instead of waiting for the lease to expire.
        let deps = &live.deps;
        if let Err(error) = deps
            .store
            .release_lease(deps.session_id, &deps.lease.owner, deps.lease.epoch)
            .await
        {
            tracing::debug!(session = %deps.session_id, %error, "lease release failed");
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        live: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SessionMsg::Tick => live.tick(&myself).await,
            SessionMsg::Input(_, caller) if live.passivating => {
                if let Some(caller) = caller {
                    caller.answer(Err(SessionError::Passivating));
                }
            }
            // A subscriber of a passivating actor would hear nothing: its caller retries.
            SessionMsg::Subscribe(..) if live.passivating => {}
            SessionMsg::Input(input, caller) => live.take_input(&myself, input, caller).await,
            SessionMsg::Delta { call_id, text } => {
                if let Some(streaming) = &mut live.streaming {
                    if streaming.call_id == call_id {
                        let offset = streaming.text.len();
                        streaming.text.push_str(&text);
                        let attempt = live.deps.lease.epoch.0;
                        live.broadcast(Frame::Delta {
                            call_id,
                            attempt,
                            text,
                            offset,
                        });
                    }
                }
            }
            SessionMsg::Progress { call_id, progress } => {
                // Only for a call that still runs: a late report of a finished one is dropped.
                if live.running_tools.contains_key(&call_id)
                    || crate::agent_tool::waits_for_child(&live.state, &call_id)
                {
                    live.progress.insert(call_id.clone(), progress.clone());
                    live.broadcast(Frame::Progress {
                        call_id,
                        progress: std::sync::Arc::new(progress),
                    });
                }
            }
            SessionMsg::Subscribe(subscriber, reply) => {
                let _ = reply.send(live.attach(subscriber));
            }
            SessionMsg::State(reply) => {
                let _ = reply.send(live.state.clone());
            }
        }
        Ok(())
    }
}

impl Live {
    /// The periodic tick: drops closed subscribers, renews the lease, and passivates an idle
    /// actor.
    async fn tick(&mut self, myself: &ActorRef<SessionMsg>) {
        self.subscribers.retain(|s| !s.sender.is_closed());
        if self.lease_renewed.elapsed() >= self.deps.lifecycle.lease_ttl / 3 {
            let deps = &self.deps;
            match deps
                .store
                .renew_lease(
                    deps.session_id,
                    &deps.lease.owner,
                    deps.lease.epoch,
                    deps.lifecycle.lease_ttl,
                )
                .await
            {
                Ok(_) => self.lease_renewed = std::time::Instant::now(),
                Err(stead_persistence::Error::Fenced { .. }) => {
                    tracing::warn!(session = %deps.session_id, "lease lost; stopping");
                    myself.stop(Some("lease lost".into()));
                    return;
                }
                Err(error) => {
                    tracing::warn!(session = %deps.session_id, %error, "lease renewal failed")
                }
            }
        }
        // A pending approval's expiry is a row of the due index: the scheduler wakes a
        // passivated session when it is due.
        // A turn parked on a person's decision passivates sooner (`passivate_parked_after`).
        let parked = self
            .state
            .turn
            .as_ref()
            .is_some_and(|turn| turn.awaiting_approval());
        let after = if parked {
            self.deps.lifecycle.passivate_parked_after
        } else {
            self.deps.lifecycle.passivate_after
        };
        let idle = self.tasks_in_flight == 0
            && self.subscribers.is_empty()
            && self.last_activity.elapsed() >= after;
        if idle {
            // Parked or idle sessions hold nothing: state is in the journal. Draining
            // (not stopping) answers what is already queued — inputs with
            // `Passivating`, so their senders retry on a fresh activation instead of
            // losing them — and refuses what comes later the same way.
            self.passivating = true;
            let _ = myself.drain();
        }
    }

    /// An input from a caller or from the actor's own tasks: processed (kept for another try
    /// when the journal cannot take it now), answered, and its actions started.
    async fn take_input(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        input: Input,
        caller: Option<Caller>,
    ) {
        if let Some(caller) = &caller {
            caller
                .taken
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.last_activity = std::time::Instant::now();
        if is_task_outcome(&input) {
            self.tasks_in_flight = self.tasks_in_flight.saturating_sub(1);
        }
        let retry = match &input {
            Input::ModelFinished { call_id, .. } => Some((call_id.clone(), true)),
            Input::ToolFinished { call_id, .. } | Input::ToolChecked { call_id, .. } => {
                Some((call_id.clone(), false))
            }
            _ => None,
        };
        // The actor's own inputs (a task's outcome, a timer) have no caller to retry
        // them: kept for another try when the journal cannot take them now.
        let own = caller.is_none().then(|| input.clone());
        let mut result = self.process(myself, input).await;
        if let (Err(SessionError::Storage(error)), Some(input)) = (&result, own) {
            let wait = UNWRITTEN_FIRST_WAIT
                .saturating_mul(1 << self.unwritten.min(6))
                .min(UNWRITTEN_MAX_WAIT);
            self.unwritten += 1;
            tracing::warn!(
                session = %self.deps.session_id, %error, retry_in_ms = wait.as_millis() as u64,
                "an input of the session could not be journaled; trying again"
            );
            // Still in flight: the session must not passivate with it pending.
            if is_task_outcome(&input) {
                self.tasks_in_flight += 1;
            }
            myself.send_after(wait, move || SessionMsg::Input(input, None));
            return;
        }
        if result.is_ok() {
            self.unwritten = 0;
        }
        // A model answer or tool result too large to journal fails its call instead of
        // wedging the turn.
        if let (Err(SessionError::TooLarge(why)), Some((call_id, model))) = (&result, retry) {
            let error = format!("the result could not be journaled: {why}");
            let failed = if model {
                Input::ModelFailed { call_id, error }
            } else {
                Input::ToolFailed { call_id, error }
            };
            result = self.process(myself, failed).await;
        }
        // The caller hears of the commit before the actions start, so a failure while
        // starting them (a restart follows) cannot hide that the input was committed.
        let (answer, actions) = match result {
            Ok((seq, actions)) => (Ok(seq), actions),
            Err(error) => (Err(error), Vec::new()),
        };
        if let Some(caller) = caller {
            caller.answer(answer);
        }
        if actions
            .iter()
            .any(|a| matches!(a, crate::Action::CallModel { .. }))
        {
            self.journal_tool_list(myself).await;
        }
        for action in actions {
            self.start(myself, action);
        }
        // The snapshot only speeds up activation: it is written after the caller has
        // its answer.
        if self.deps.lifecycle.snapshot_due(
            self.state.last_seq - self.last_snapshot,
            self.state.entries(),
        ) {
            self.snapshot();
        }
    }

    /// A new subscriber, and where the session stands for it.
    fn attach(&mut self, subscriber: Subscriber) -> Attached {
        let attached = Attached {
            last_seq: self.state.last_seq,
            status: self.state.status(),
            streaming: self
                .streaming
                .as_ref()
                .map(|s| (s.call_id.clone(), s.text.clone())),
            attempt: self.deps.lease.epoch.0,
            progress: self
                .progress
                .iter()
                .map(|(call, p)| (call.clone(), p.clone()))
                .collect(),
        };
        self.subscribers.push(subscriber);
        attached
    }
}

/// Whether `input` reports the end of one of the actor's model or tool tasks.
fn is_task_outcome(input: &Input) -> bool {
    matches!(
        input,
        Input::ModelFinished { .. }
            | Input::ModelFailed { .. }
            | Input::ModelBudgetExceeded { .. }
            | Input::Compact { .. }
            | Input::ToolFinished { .. }
            | Input::ToolChecked { .. }
            | Input::ToolFailed { .. }
            | Input::RunBuiltin { .. }
            | Input::ChildStarted { .. }
    )
}

//! The session actor — the durable object. One ractor actor per live session owns its folded
//! state; every input goes through `decide`, its events are appended to the journal (fenced by
//! the last seq the actor folded), folded, broadcast, and only then are its actions started.
//! Model and tool calls run as tasks that report back to the actor as messages, so the actor
//! never blocks: a session parked on an approval holds no task at all.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::Value;
use stead_persistence::{JournalStore, NewEvent};
use tokio::sync::mpsc::UnboundedSender;
use tracing::Instrument;
use uuid::Uuid;

use crate::decide::{decide, Action, AgentRules, Input, ModelOutput, Refusal};
use crate::events::SessionEvent;
use crate::state::{SessionState, TranscriptEntry};
use crate::tools::{Tool, ToolContext};

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// One model call of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The session whose actor calls.
    pub session_id: Uuid,
    pub route: String,
    pub system_prompt: String,
    pub transcript: Vec<TranscriptEntry>,
    pub tools: Vec<ToolSpec>,
}

/// How sessions reach models: the local engine now, the model router later.
#[async_trait]
pub trait ModelClient: Send + Sync + 'static {
    /// Streams text deltas into `deltas` and returns the whole answer. Stops early (with an
    /// error) once `cancel` is set.
    async fn complete(
        &self,
        request: ModelRequest,
        deltas: UnboundedSender<String>,
        cancel: Arc<AtomicBool>,
    ) -> Result<ModelOutput, String>;
}

/// An agent: its loop rules, prompt and tools.
pub struct Agent {
    pub name: String,
    pub system_prompt: String,
    pub rules: AgentRules,
    pub tools: BTreeMap<String, Arc<dyn Tool>>,
}

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
        call_id: String,
        text: String,
        offset: usize,
    },
}

/// Where a session stood when a subscriber attached: everything after it arrives as frames.
#[derive(Debug, Clone, PartialEq)]
pub struct Attached {
    pub last_seq: i64,
    pub status: &'static str,
    /// The model call in flight and its text so far.
    pub streaming: Option<(String, String)>,
}

/// A subscriber's end: frames in order, bounded. A subscriber that falls `capacity` frames
/// behind is dropped (its channel closes and `lagged` is set) so it can never stall the session
/// or the other subscribers.
pub struct Subscription {
    pub frames: tokio::sync::mpsc::Receiver<Frame>,
    pub attached: Attached,
    pub lagged: Arc<AtomicBool>,
}

/// The actor's side of a subscription.
pub struct Subscriber {
    sender: tokio::sync::mpsc::Sender<Frame>,
    lagged: Arc<AtomicBool>,
}

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
    /// An event would be over the journal's size limit; nothing was written.
    #[error("{0}")]
    TooLarge(String),
}

pub enum SessionMsg {
    Input(Input, Option<RpcReplyPort<Result<i64, SessionError>>>),
    /// Periodic: passivate when idle.
    Tick,
    Delta {
        call_id: String,
        text: String,
    },
    Subscribe(Subscriber, RpcReplyPort<Attached>),
    State(RpcReplyPort<SessionState>),
}

pub struct SessionDeps {
    pub session_id: Uuid,
    /// The lease this activation holds: every journal write is fenced by its epoch.
    pub lease: stead_persistence::Lease,
    pub agent: Arc<Agent>,
    pub store: Arc<dyn JournalStore>,
    pub model: Arc<dyn ModelClient>,
    pub lifecycle: Lifecycle,
}

/// When actors write snapshots and when idle ones go to sleep.
#[derive(Debug, Clone, Copy)]
pub struct Lifecycle {
    /// Write a snapshot of the folded state every this many events.
    pub snapshot_every: i64,
    /// Stop an actor that has had no work and no subscribers for this long; the next access
    /// re-activates it from its snapshot and journal.
    pub passivate_after: std::time::Duration,
    /// A session whose actor fails this many times within `restart_window` is failed.
    pub restart_limit: u32,
    pub restart_window: std::time::Duration,
    /// Wait before the first restart, doubling per failure in the window up to the max.
    pub restart_backoff: std::time::Duration,
    pub restart_backoff_max: std::time::Duration,
    /// How long an activation's lease lasts without renewal (renewed every third of it); a
    /// node that dies holds its sessions at most this long.
    pub lease_ttl: std::time::Duration,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            snapshot_every: 100,
            passivate_after: std::time::Duration::from_secs(300),
            restart_limit: 5,
            restart_window: std::time::Duration::from_secs(60),
            restart_backoff: std::time::Duration::from_millis(100),
            restart_backoff_max: std::time::Duration::from_secs(5),
            lease_ttl: std::time::Duration::from_secs(30),
        }
    }
}

pub struct SessionActor;

pub struct Live {
    deps: SessionDeps,
    state: SessionState,
    subscribers: Vec<Subscriber>,
    /// Model and tool tasks started and not yet reported back.
    tasks_in_flight: usize,
    last_activity: std::time::Instant,
    last_snapshot: i64,
    /// The model call in flight: its id, cancel flag and the text streamed so far.
    streaming: Option<(String, Arc<AtomicBool>, String)>,
    /// The status last written to the session's row (for listing and filtering).
    synced_status: &'static str,
    lease_renewed: std::time::Instant,
    /// The `invoke_agent {agent}` span of the turn in progress (model and tool calls are its
    /// children); it ends when the session stops running (a turn's end, or parking).
    turn_span: Option<tracing::Span>,
}

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
        let row_status = deps.store.get_session(deps.session_id).await?.status;
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
        if let (Some(timeout), Some(turn)) = (deps.agent.rules.approval_timeout, &state.turn) {
            // Approvals still pending after a restart get the full timeout again from now:
            // an approval may expire late, never early.
            for call in &turn.calls {
                if matches!(
                    call.status,
                    crate::state::CallStatus::AwaitingApproval { .. }
                ) {
                    let me = myself.clone();
                    let call_id = call.call_id.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(timeout).await;
                        let _ =
                            me.cast(SessionMsg::Input(Input::ApprovalExpired { call_id }, None));
                    });
                }
            }
        }
        let every = (deps.lifecycle.passivate_after / 4).min(deps.lifecycle.lease_ttl / 3);
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
        let mut live = Live {
            deps,
            state,
            subscribers: Vec::new(),
            tasks_in_flight: 0,
            last_activity: std::time::Instant::now(),
            last_snapshot,
            streaming: None,
            synced_status: row_status.as_str(),
            lease_renewed: std::time::Instant::now(),
            turn_span: None,
        };
        // The row's status follows the journal; a crash between the two is mended here.
        live.sync_status().await;
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
            SessionMsg::Tick => {
                live.subscribers.retain(|s| !s.sender.is_closed());
                if live.lease_renewed.elapsed() >= live.deps.lifecycle.lease_ttl / 3 {
                    let deps = &live.deps;
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
                        Ok(_) => live.lease_renewed = std::time::Instant::now(),
                        Err(stead_persistence::Error::Fenced { .. }) => {
                            tracing::warn!(session = %deps.session_id, "lease lost; stopping");
                            myself.stop(Some("lease lost".into()));
                            return Ok(());
                        }
                        Err(error) => {
                            tracing::warn!(session = %deps.session_id, %error, "lease renewal failed")
                        }
                    }
                }
                // A pending approval with a timeout keeps its actor until the expiry fires (the
                // timer lives in the actor).
                let expiry_pending = live.deps.agent.rules.approval_timeout.is_some()
                    && live
                        .state
                        .turn
                        .as_ref()
                        .is_some_and(|t| t.awaiting_approval());
                let idle = live.tasks_in_flight == 0
                    && !expiry_pending
                    && live.subscribers.is_empty()
                    && live.last_activity.elapsed() >= live.deps.lifecycle.passivate_after;
                if idle {
                    // Parked or idle sessions hold nothing: state is in the journal.
                    myself.stop(Some("passivated".into()));
                }
                return Ok(());
            }
            SessionMsg::Input(input, reply) => {
                live.last_activity = std::time::Instant::now();
                if matches!(
                    input,
                    Input::ModelFinished { .. }
                        | Input::ModelFailed { .. }
                        | Input::ToolFinished { .. }
                        | Input::ToolFailed { .. }
                ) {
                    live.tasks_in_flight = live.tasks_in_flight.saturating_sub(1);
                }
                let retry = match &input {
                    Input::ModelFinished { call_id, .. } => Some((call_id.clone(), true)),
                    Input::ToolFinished { call_id, .. } => Some((call_id.clone(), false)),
                    _ => None,
                };
                let mut result = live.process(&myself, input).await;
                // A model answer or tool result too large to journal fails its call instead of
                // wedging the turn.
                if let (Err(SessionError::TooLarge(why)), Some((call_id, model))) = (&result, retry)
                {
                    let error = format!("the result could not be journaled: {why}");
                    let failed = if model {
                        Input::ModelFailed { call_id, error }
                    } else {
                        Input::ToolFailed { call_id, error }
                    };
                    result = live.process(&myself, failed).await;
                }
                // The caller hears of the commit before the actions start, so a failure while
                // starting them (a restart follows) cannot hide that the input was committed.
                let (answer, actions) = match result {
                    Ok((seq, actions)) => (Ok(seq), actions),
                    Err(error) => (Err(error), Vec::new()),
                };
                if let Some(reply) = reply {
                    let _ = reply.send(answer);
                }
                for action in actions {
                    live.start(&myself, action);
                }
                // The snapshot only speeds up activation: it is written after the caller has
                // its answer.
                if live.state.last_seq - live.last_snapshot >= live.deps.lifecycle.snapshot_every {
                    live.snapshot().await;
                }
            }
            SessionMsg::Delta { call_id, text } => {
                if let Some((current, _, buffer)) = &mut live.streaming {
                    if *current == call_id {
                        let offset = buffer.len();
                        buffer.push_str(&text);
                        live.broadcast(Frame::Delta {
                            call_id,
                            text,
                            offset,
                        });
                    }
                }
            }
            SessionMsg::Subscribe(subscriber, reply) => {
                let attached = Attached {
                    last_seq: live.state.last_seq,
                    status: live.state.status(),
                    streaming: live
                        .streaming
                        .as_ref()
                        .map(|(call_id, _, text)| (call_id.clone(), text.clone())),
                };
                live.subscribers.push(subscriber);
                let _ = reply.send(attached);
            }
            SessionMsg::State(reply) => {
                let _ = reply.send(live.state.clone());
            }
        }
        Ok(())
    }
}

impl Live {
    fn broadcast(&mut self, frame: Frame) {
        self.subscribers
            .retain(|s| match s.sender.try_send(frame.clone()) {
                Ok(()) => true,
                Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                    s.lagged.store(true, Ordering::Relaxed);
                    false
                }
                Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => false,
            });
    }

    async fn process(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        input: Input,
    ) -> Result<(i64, Vec<Action>), SessionError> {
        let session_id = self.deps.session_id.to_string();
        let decision = decide(&self.state, &session_id, input, &self.deps.agent.rules)
            .map_err(SessionError::Refused)?;
        if !decision.events.is_empty() {
            let rows: Vec<NewEvent> = decision
                .events
                .iter()
                .map(|e| {
                    let (kind, payload) = e.to_parts();
                    NewEvent::new(kind, payload)
                })
                .collect();
            let times: Vec<_> = rows.iter().map(|r| r.created_at).collect();
            // The row's status changes in the same transaction as the journal.
            let status = decision
                .status
                .filter(|s| *s != self.synced_status)
                .map(|s| s.parse().expect("the fold's statuses are the row's"));
            let seqs = match self
                .deps
                .store
                .append_fenced(
                    self.deps.session_id,
                    self.state.last_seq,
                    self.deps.lease.epoch,
                    status,
                    rows,
                )
                .await
            {
                Ok(seqs) => seqs,
                Err(
                    error @ (stead_persistence::Error::Conflict { .. }
                    | stead_persistence::Error::Fenced { .. }),
                ) => {
                    // Another writer appended to this session: this actor's state is stale and
                    // it must not act on it. It stops; the next access re-activates from the
                    // journal (SPEC §2.1).
                    tracing::warn!(session = %self.deps.session_id, %error, "fenced out; stopping");
                    myself.stop(Some("fenced by another writer".into()));
                    return Err(SessionError::Journal(error.to_string()));
                }
                Err(error @ stead_persistence::Error::EventTooLarge { .. }) => {
                    return Err(SessionError::TooLarge(error.to_string()))
                }
                Err(error) => return Err(SessionError::Journal(error.to_string())),
            };
            if let Some(status) = decision.status {
                self.synced_status = status;
                if status != "running" {
                    self.turn_span = None;
                } else if self.turn_span.is_none() {
                    let agent = &self.deps.agent.name;
                    self.turn_span = Some(tracing::info_span!(
                        parent: None,
                        "invoke_agent",
                        "otel.name" = format!("invoke_agent {agent}"),
                        "otel.kind" = "internal",
                        "gen_ai.operation.name" = "invoke_agent",
                        "gen_ai.agent.name" = %agent,
                        "gen_ai.conversation.id" = %self.deps.session_id,
                    ));
                }
            }
            for ((seq, event), at) in seqs.into_iter().zip(decision.events).zip(times) {
                if let SessionEvent::ApprovalRequested { call_id, .. } = &event {
                    self.schedule_expiry(myself, call_id.clone());
                }
                self.state.apply(seq, &event);
                self.broadcast(Frame::Event {
                    seq,
                    event: Arc::new(event),
                    at,
                    wire: Default::default(),
                });
            }
        }
        Ok((self.state.last_seq, decision.actions))
    }

    /// Rejects the approval as expired when its time runs out (a decision first wins; the late
    /// expiry is then refused and dropped).
    fn schedule_expiry(&self, myself: &ActorRef<SessionMsg>, call_id: String) {
        if let Some(timeout) = self.deps.agent.rules.approval_timeout {
            let me = myself.clone();
            tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                let _ = me.cast(SessionMsg::Input(Input::ApprovalExpired { call_id }, None));
            });
        }
    }

    /// Mends the row's status at activation (appends carry it from then on). The journal is
    /// the truth; the row is an index over it.
    async fn sync_status(&mut self) {
        let status = self.state.status();
        if status == self.synced_status {
            return;
        }
        let id = self.deps.session_id;
        let result = match status {
            "closed" => self.deps.store.close_session(id).await,
            other => {
                let status = other.parse().expect("the fold's statuses are the row's");
                self.deps.store.update_status(id, status).await
            }
        };
        match result {
            Ok(_) => self.synced_status = status,
            Err(error) => tracing::warn!(session = %id, %error, "status update failed"),
        }
    }

    /// Writes the folded state; a failure only costs a longer replay next time.
    async fn snapshot(&mut self) {
        let state = crate::replay::snapshot_document(&self.state);
        match self
            .deps
            .store
            .put_snapshot(self.deps.session_id, self.state.last_seq, state)
            .await
        {
            Ok(()) => self.last_snapshot = self.state.last_seq,
            Err(error) => {
                tracing::warn!(session = %self.deps.session_id, %error, "snapshot failed")
            }
        }
    }

    /// Starts an action's work as a task that reports back to the actor.
    fn start(&mut self, myself: &ActorRef<SessionMsg>, action: Action) {
        if matches!(action, Action::CallModel { .. } | Action::RunTool { .. }) {
            self.tasks_in_flight += 1;
        }
        match action {
            Action::CallModel { call_id } => {
                let cancel = Arc::new(AtomicBool::new(false));
                self.streaming = Some((call_id.clone(), cancel.clone(), String::new()));
                let agent = &self.deps.agent;
                let request = ModelRequest {
                    session_id: self.deps.session_id,
                    route: self.state.route(&agent.rules.route).to_string(),
                    system_prompt: self
                        .state
                        .overrides
                        .system_prompt
                        .clone()
                        .unwrap_or_else(|| agent.system_prompt.clone()),
                    transcript: self.state.transcript.clone(),
                    tools: agent
                        .tools
                        .values()
                        .map(|t| ToolSpec {
                            name: t.name().to_string(),
                            description: t.description().to_string(),
                            parameters: t.parameters(),
                        })
                        .collect(),
                };
                let model = self.deps.model.clone();
                let me = myself.clone();
                let turn = self.turn_span.clone().unwrap_or_else(tracing::Span::none);
                tokio::spawn(async move {
                    let (deltas, mut stream) = tokio::sync::mpsc::unbounded_channel();
                    let forward = {
                        let me = me.clone();
                        let call_id = call_id.clone();
                        tokio::spawn(async move {
                            while let Some(text) = stream.recv().await {
                                let _ = me.cast(SessionMsg::Delta {
                                    call_id: call_id.clone(),
                                    text,
                                });
                            }
                        })
                    };
                    let call = tokio::spawn(
                        async move { model.complete(request, deltas, cancel).await }
                            .instrument(turn),
                    );
                    let result = match call.await {
                        Ok(result) => result,
                        Err(join) => {
                            Err(format!("the model client crashed: {}", panic_message(join)))
                        }
                    };
                    let _ = forward.await;
                    let input = match result {
                        Ok(output) => Input::ModelFinished { call_id, output },
                        Err(error) => Input::ModelFailed { call_id, error },
                    };
                    let _ = me.cast(SessionMsg::Input(input, None));
                });
            }
            Action::RunTool {
                call_id,
                tool,
                arguments,
                idempotency_key,
            } => {
                let Some(tool) = self.deps.agent.tools.get(&tool).cloned() else {
                    let input = Input::ToolFailed {
                        call_id,
                        error: format!("unknown tool `{tool}`"),
                    };
                    let _ = myself.cast(SessionMsg::Input(input, None));
                    return;
                };
                let context = ToolContext {
                    session_id: self.deps.session_id,
                    call_id: call_id.clone(),
                    idempotency_key,
                };
                let me = myself.clone();
                let span = tracing::info_span!(
                    parent: self.turn_span.as_ref().and_then(|s| s.id()),
                    "execute_tool",
                    "otel.name" = format!("execute_tool {}", tool.name()),
                    "otel.kind" = "internal",
                    "gen_ai.operation.name" = "execute_tool",
                    "gen_ai.tool.name" = %tool.name(),
                    "gen_ai.tool.call.id" = %call_id,
                    "gen_ai.conversation.id" = %self.deps.session_id,
                );
                tokio::spawn(async move {
                    // The tool runs in a task of its own: a panic in it is contained there and
                    // becomes the call's error; the session and its actor carry on.
                    let run = tokio::spawn(
                        async move { tool.execute(arguments, &context).await }.instrument(span),
                    );
                    let input = match run.await {
                        Ok(Ok(result)) => Input::ToolFinished { call_id, result },
                        Ok(Err(error)) => Input::ToolFailed {
                            call_id,
                            error: error.0,
                        },
                        Err(join) => Input::ToolFailed {
                            call_id,
                            error: format!("the tool crashed: {}", panic_message(join)),
                        },
                    };
                    let _ = me.cast(SessionMsg::Input(input, None));
                });
            }
            Action::AbortModelCall { call_id } => {
                if let Some((current, cancel, _)) = &self.streaming {
                    if *current == call_id {
                        cancel.store(true, Ordering::Relaxed);
                    }
                }
                self.streaming = None;
            }
        }
    }
}

fn panic_message(join: tokio::task::JoinError) -> String {
    match join.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into()),
        Err(join) => join.to_string(),
    }
}

/// Keeps one live actor per session id on this node, activates sessions on demand, and
/// supervises their actors: an actor that fails (a panic in its handler) is restarted from the
/// journal after a backoff; one that fails `restart_limit` times within `restart_window` gets a
/// journaled `session_failed` with the reason and takes no more input.
pub struct SessionRegistry {
    shared: Arc<Shared>,
}

struct Shared {
    /// This registry's name as a lease owner (host, process, instance).
    node: String,
    lifecycle: Lifecycle,
    store: Arc<dyn JournalStore>,
    model: Arc<dyn ModelClient>,
    agents: HashMap<String, Arc<Agent>>,
    live: Mutex<HashMap<Uuid, ActorRef<SessionMsg>>>,
    /// Recent failures per session (pruned to the restart window), and when a restarting
    /// session may be activated again.
    failures: Mutex<HashMap<Uuid, (Vec<std::time::Instant>, std::time::Instant)>>,
    activation: tokio::sync::Mutex<()>,
    supervisor: tokio::sync::OnceCell<ActorRef<()>>,
}

/// The supervising actor: session actors are linked to it, so their failures arrive here.
struct Supervisor;

impl Actor for Supervisor {
    type Msg = ();
    type State = std::sync::Weak<Shared>;
    type Arguments = std::sync::Weak<Shared>;

    async fn pre_start(
        &self,
        _myself: ActorRef<()>,
        shared: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(shared)
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<()>,
        event: ractor::SupervisionEvent,
        shared: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let ractor::SupervisionEvent::ActorFailed(cell, error) = event else {
            return Ok(());
        };
        let Some(shared) = shared.upgrade() else {
            return Ok(());
        };
        let Some(id) = shared.forget(cell.get_id()) else {
            return Ok(());
        };
        let reason = error.to_string();
        let failures = shared.record_failure(id);
        let lifecycle = shared.lifecycle;
        if failures >= lifecycle.restart_limit {
            tracing::error!(session = %id, failures, %reason, "session actor keeps failing; the session is failed");
            tokio::spawn(async move {
                if let Err(error) = shared.fail(id, &reason, failures).await {
                    tracing::error!(session = %id, %error, "could not journal the session's failure");
                }
            });
        } else {
            tracing::warn!(session = %id, failures, %reason, "session actor failed; restarting");
            tokio::spawn(async move {
                // Restart now (after the backoff) rather than on next access, so a turn in
                // flight carries on without anyone asking.
                if let Err(error) = shared.activate(id).await {
                    tracing::warn!(session = %id, %error, "restart failed");
                }
            });
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<()>,
        _message: (),
        _shared: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

impl Shared {
    /// Forgets the actor with this id; returns its session.
    fn forget(&self, actor: ractor::ActorId) -> Option<Uuid> {
        let mut live = self.live.lock().expect("registry lock");
        let id = live
            .iter()
            .find(|(_, a)| a.get_id() == actor)
            .map(|(id, _)| *id)?;
        live.remove(&id);
        Some(id)
    }

    /// Records a failure; returns the failures within the window, this one included, and sets
    /// when the session may be activated again.
    fn record_failure(&self, id: Uuid) -> u32 {
        let now = std::time::Instant::now();
        let mut failures = self.failures.lock().expect("registry lock");
        let (times, _) = failures.entry(id).or_insert_with(|| (Vec::new(), now));
        times.retain(|t| now.duration_since(*t) < self.lifecycle.restart_window);
        times.push(now);
        let count = times.len() as u32;
        let backoff = self
            .lifecycle
            .restart_backoff
            .saturating_mul(1 << (count - 1).min(16))
            .min(self.lifecycle.restart_backoff_max);
        failures.get_mut(&id).expect("just inserted").1 = now + backoff;
        count
    }

    fn live_actor(&self, id: Uuid) -> Option<ActorRef<SessionMsg>> {
        let mut live = self.live.lock().expect("registry lock");
        // Right after spawn an actor may still be `Starting`: that one is live too. A stopping
        // or stopped (passivated, fenced) actor is forgotten, so the map holds live ones only.
        let stopped = live.get(&id).is_some_and(|a| {
            matches!(
                a.get_status(),
                ractor::ActorStatus::Stopping | ractor::ActorStatus::Stopped
            )
        });
        if stopped {
            live.remove(&id);
        }
        live.get(&id).cloned()
    }

    async fn supervisor(self: &Arc<Self>) -> Result<ActorRef<()>, SessionError> {
        self.supervisor
            .get_or_try_init(|| async {
                Actor::spawn(None, Supervisor, Arc::downgrade(self))
                    .await
                    .map(|(actor, _)| actor)
                    .map_err(|e| SessionError::Journal(format!("cannot start the supervisor: {e}")))
            })
            .await
            .cloned()
    }

    async fn activate(self: &Arc<Self>, id: Uuid) -> Result<ActorRef<SessionMsg>, SessionError> {
        if let Some(actor) = self.live_actor(id) {
            return Ok(actor);
        }
        // A session restarting after a failure waits out its backoff.
        let not_before = self
            .failures
            .lock()
            .expect("registry lock")
            .get(&id)
            .map(|(_, at)| *at);
        if let Some(at) = not_before {
            tokio::time::sleep_until(at.into()).await;
        }
        let supervisor = self.supervisor().await?;
        // One activation at a time, re-checked under the lock: never two actors for one id.
        let _guard = self.activation.lock().await;
        if let Some(actor) = self.live_actor(id) {
            return Ok(actor);
        }
        let row = self.store.get_session(id).await.map_err(|e| match e {
            stead_persistence::Error::SessionNotFound(_) => SessionError::NotFound,
            other => SessionError::Journal(other.to_string()),
        })?;
        let agent = self
            .agents
            .get(&row.agent)
            .cloned()
            .ok_or_else(|| SessionError::UnknownAgent(row.agent.clone()))?;
        let lease = self.lease(id).await?;
        let deps = SessionDeps {
            lease: lease.clone(),
            session_id: id,
            agent,
            store: self.store.clone(),
            model: self.model.clone(),
            lifecycle: self.lifecycle,
        };
        let (actor, _) =
            match Actor::spawn_linked(None, SessionActor, deps, supervisor.get_cell()).await {
                Ok(spawned) => spawned,
                Err(error) => {
                    let _ = self.store.release_lease(id, &self.node, lease.epoch).await;
                    return Err(SessionError::Journal(format!(
                        "cannot activate the session: {error}"
                    )));
                }
            };
        self.live
            .lock()
            .expect("registry lock")
            .insert(id, actor.clone());
        Ok(actor)
    }

    /// Takes the session's lease for this node.
    async fn lease(&self, id: Uuid) -> Result<stead_persistence::Lease, SessionError> {
        self.store
            .acquire_lease(id, &self.node, self.lifecycle.lease_ttl)
            .await
            .map_err(|e| match e {
                stead_persistence::Error::LeaseHeld { owner, .. } => {
                    SessionError::HeldElsewhere(owner)
                }
                stead_persistence::Error::SessionNotFound(_) => SessionError::NotFound,
                other => SessionError::Journal(other.to_string()),
            })
    }

    /// Journals `session_failed` (no actor is live: activation is held off meanwhile).
    async fn fail(&self, id: Uuid, reason: &str, failures: u32) -> Result<(), SessionError> {
        let _guard = self.activation.lock().await;
        let journal = |e: stead_persistence::Error| SessionError::Journal(e.to_string());
        let lease = self.lease(id).await?;
        let row = self.store.get_session(id).await.map_err(journal)?;
        let event = SessionEvent::SessionFailed {
            reason: format!("the session actor failed {failures} times; last: {reason}"),
        };
        let (kind, payload) = event.to_parts();
        let appended = self
            .store
            .append_fenced(
                id,
                row.last_seq,
                lease.epoch,
                Some(stead_persistence::SessionStatus::Failed),
                vec![NewEvent::new(kind, payload)],
            )
            .await;
        let _ = self.store.release_lease(id, &self.node, lease.epoch).await;
        appended.map_err(journal)?;
        self.failures.lock().expect("registry lock").remove(&id);
        Ok(())
    }
}

/// The default lease owner name: the host's name. It is stable across restarts on purpose: a
/// node that comes back after a crash takes its sessions again at once (a new epoch fences
/// anything the dead process left) instead of waiting for their leases to expire. Nodes that
/// share a database need distinct names (`SessionRegistry::with_node`).
pub fn default_node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "stead".into())
}

impl SessionRegistry {
    pub fn new(
        store: Arc<dyn JournalStore>,
        model: Arc<dyn ModelClient>,
        agents: Vec<Agent>,
    ) -> Self {
        SessionRegistry {
            shared: Arc::new(Shared {
                node: default_node_name(),
                lifecycle: Lifecycle::default(),
                store,
                model,
                agents: agents
                    .into_iter()
                    .map(|a| (a.name.clone(), Arc::new(a)))
                    .collect(),
                live: Mutex::new(HashMap::new()),
                failures: Mutex::new(HashMap::new()),
                activation: tokio::sync::Mutex::new(()),
                supervisor: tokio::sync::OnceCell::new(),
            }),
        }
    }

    /// Names this registry as a lease owner (one name per node sharing a database).
    pub fn with_node(mut self, node: impl Into<String>) -> Self {
        Arc::get_mut(&mut self.shared)
            .expect("the node is set before the registry is shared")
            .node = node.into();
        self
    }

    pub fn with_lifecycle(mut self, lifecycle: Lifecycle) -> Self {
        Arc::get_mut(&mut self.shared)
            .expect("lifecycle is set before the registry is shared")
            .lifecycle = lifecycle;
        self
    }

    /// The configured agents, sorted by name.
    pub fn agents(&self) -> Vec<Arc<Agent>> {
        let mut agents: Vec<Arc<Agent>> = self.shared.agents.values().cloned().collect();
        agents.sort_by(|a, b| a.name.cmp(&b.name));
        agents
    }

    pub fn agent(&self, name: &str) -> Option<Arc<Agent>> {
        self.shared.agents.get(name).cloned()
    }

    /// Whether the session has a live actor now (not passivated).
    pub fn is_live(&self, id: Uuid) -> bool {
        self.shared.live_actor(id).is_some()
    }

    /// The session's actor, activating it from the journal when it is not live.
    pub async fn session(&self, id: Uuid) -> Result<ActorRef<SessionMsg>, SessionError> {
        self.shared.activate(id).await
    }

    /// Forgets every actor that has stopped (passivated sessions cost nothing here).
    pub fn prune(&self) -> usize {
        let mut live = self.shared.live.lock().expect("registry lock");
        live.retain(|_, a| {
            !matches!(
                a.get_status(),
                ractor::ActorStatus::Stopping | ractor::ActorStatus::Stopped
            )
        });
        live.len()
    }

    /// Sends an input and waits until its events are committed.
    pub async fn send(&self, id: Uuid, input: Input) -> Result<i64, SessionError> {
        let actor = self.session(id).await?;
        match actor
            .call(|reply| SessionMsg::Input(input, Some(reply)), None)
            .await
        {
            Ok(ractor::rpc::CallResult::Success(result)) => result,
            _ => Err(SessionError::Journal("the session actor stopped".into())),
        }
    }

    /// Attaches a subscriber that may fall `capacity` frames behind before it is dropped.
    pub async fn attach(&self, id: Uuid, capacity: usize) -> Result<Subscription, SessionError> {
        let actor = self.session(id).await?;
        let (sender, frames) = tokio::sync::mpsc::channel(capacity.max(1));
        let lagged = Arc::new(AtomicBool::new(false));
        let subscriber = Subscriber {
            sender,
            lagged: lagged.clone(),
        };
        match actor
            .call(|reply| SessionMsg::Subscribe(subscriber, reply), None)
            .await
        {
            Ok(ractor::rpc::CallResult::Success(attached)) => Ok(Subscription {
                frames,
                attached,
                lagged,
            }),
            _ => Err(SessionError::Journal("the session actor stopped".into())),
        }
    }

    /// Frames from now on (a generous buffer, for in-process callers and tests).
    pub async fn subscribe(
        &self,
        id: Uuid,
    ) -> Result<tokio::sync::mpsc::Receiver<Frame>, SessionError> {
        Ok(self.attach(id, 65_536).await?.frames)
    }

    pub async fn state(&self, id: Uuid) -> Result<SessionState, SessionError> {
        let actor = self.session(id).await?;
        match actor.call(SessionMsg::State, None).await {
            Ok(ractor::rpc::CallResult::Success(state)) => Ok(state),
            _ => Err(SessionError::Journal("the session actor stopped".into())),
        }
    }

    /// Stops every live actor (what a process exit does to them).
    pub fn stop_all(&self) {
        for (_, actor) in self.shared.live.lock().expect("registry lock").drain() {
            actor.stop(None);
        }
    }
}

//! The session registry: one live actor per session id on this node, activation on demand
//! under the session's lease, and the API (send, attach, subscribe, state) callers use.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ractor::{Actor, ActorRef};
use stead_persistence::SessionStore;
use uuid::Uuid;

use super::supervisor::Supervisor;
use super::{
    Agent, Caller, Lifecycle, ModelClient, SessionActor, SessionDeps, SessionError, SessionMsg,
    SharedFrame, Subscriber, Subscription,
};
use crate::decide::Input;
use crate::state::SessionState;

/// How often a call that met a passivating actor is tried again on a fresh activation.
const PASSIVATION_RETRIES: usize = 5;

/// Keeps one live actor per session id on this node, activates sessions on demand, and
/// supervises their actors: an actor that fails (a panic in its handler) is restarted from the
/// journal after a backoff; one that fails `restart_limit` times within `restart_window` gets a
/// journaled `session_failed` with the reason and takes no more input.
#[derive(Clone)]
pub struct SessionRegistry {
    pub(super) shared: Arc<Shared>,
}

pub(super) struct Shared {
    /// This registry's name as a lease owner (host, process, instance).
    pub(super) node: String,
    pub(super) lifecycle: Lifecycle,
    pub(super) store: Arc<dyn SessionStore>,
    model: Arc<dyn ModelClient>,
    agents: HashMap<String, Arc<Agent>>,
    /// Agents set for one session each (an evaluation's sessions, whose tools are served
    /// from a recording): used instead of the configured agent of the session's row.
    session_agents: Mutex<HashMap<Uuid, Arc<Agent>>>,
    pub(super) live: Mutex<HashMap<Uuid, ActorRef<SessionMsg>>>,
    /// Recent failures per session (pruned to the restart window), and when a restarting
    /// session may be activated again.
    pub(super) failures: Mutex<HashMap<Uuid, (Vec<std::time::Instant>, std::time::Instant)>>,
    /// One lock per session being activated: two activations of one id never overlap, while
    /// a slow activation (a database read, a lease wait) holds up no other session.
    pub(super) activations: Mutex<HashMap<Uuid, std::sync::Weak<tokio::sync::Mutex<()>>>>,
    /// Sessions retired for good (purged): never activated again by this registry.
    pub(super) retired: Mutex<std::collections::HashSet<Uuid>>,
    supervisor: tokio::sync::OnceCell<ActorRef<()>>,
    /// Told when an actor writes a due-index row (the scheduler waits on it).
    pub(super) due_changed: Arc<tokio::sync::Notify>,
}

impl Shared {
    /// The activation lock of `id` (made on first use; forgotten once nobody holds it).
    pub(super) fn activation_lock(&self, id: Uuid) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .activations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(lock) = locks.get(&id).and_then(std::sync::Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, lock| lock.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(id, Arc::downgrade(&lock));
        lock
    }

    pub(super) fn live_actor(&self, id: Uuid) -> Option<ActorRef<SessionMsg>> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        // Right after spawn an actor may still be `Starting`: that one is live too. A stopping
        // or stopped (passivated, fenced) actor is forgotten, so the map holds live ones only.
        let stopped = live.get(&id).is_some_and(|a| {
            matches!(
                a.get_status(),
                ractor::ActorStatus::Draining
                    | ractor::ActorStatus::Stopping
                    | ractor::ActorStatus::Stopped
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

    pub(super) async fn activate(
        self: &Arc<Self>,
        id: Uuid,
    ) -> Result<ActorRef<SessionMsg>, SessionError> {
        if let Some(actor) = self.live_actor(id) {
            return Ok(actor);
        }
        // A session restarting after a failure waits out its backoff.
        let not_before = self
            .failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .map(|(_, at)| *at);
        if let Some(at) = not_before {
            tokio::time::sleep_until(at.into()).await;
        }
        let supervisor = self.supervisor().await?;
        // One activation per id at a time, re-checked under its lock: never two actors for one
        // id. Other ids activate meanwhile.
        let lock = self.activation_lock(id);
        let _guard = lock.lock().await;
        if let Some(actor) = self.live_actor(id) {
            return Ok(actor);
        }
        if self
            .retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&id)
        {
            return Err(SessionError::NotFound);
        }
        let row = self.store.get_session(id).await?;
        // A child session whose start was cut short (its row made, its journal not yet
        // written) is not a session yet: its parent's recovery writes the journal, and an actor
        // activated before that would hold a state the append does not reach.
        if row.parent.is_some() && row.last_seq == 0 {
            return Err(SessionError::NotFound);
        }
        let own = self
            .session_agents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned();
        let agent = own
            .or_else(|| self.agents.get(&row.agent).cloned())
            .ok_or_else(|| SessionError::UnknownAgent(row.agent.clone()))?;
        let lease = self.lease(id).await?;
        let deps = SessionDeps {
            lease: lease.clone(),
            session_id: id,
            project: row.project_id,
            agent,
            store: self.store.clone(),
            model: self.model.clone(),
            lifecycle: self.lifecycle,
            due_changed: self.due_changed.clone(),
            peers: Arc::downgrade(self),
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
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, actor.clone());
        Ok(actor)
    }

    /// Takes the session's lease for this node.
    pub(super) async fn lease(&self, id: Uuid) -> Result<stead_persistence::Lease, SessionError> {
        self.store
            .acquire_lease(id, &self.node, self.lifecycle.lease_ttl)
            .await
            .map_err(|e| match e {
                stead_persistence::Error::LeaseHeld { owner, .. } => {
                    SessionError::HeldElsewhere(owner)
                }
                // The database could not take the lease (down, full, failing): nothing changed.
                other => other.into(),
            })
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
        store: Arc<dyn SessionStore>,
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
                session_agents: Mutex::new(HashMap::new()),
                live: Mutex::new(HashMap::new()),
                failures: Mutex::new(HashMap::new()),
                activations: Mutex::new(HashMap::new()),
                retired: Mutex::new(std::collections::HashSet::new()),
                supervisor: tokio::sync::OnceCell::new(),
                due_changed: Arc::new(tokio::sync::Notify::new()),
            }),
        }
    }

    /// Names this registry as a lease owner (one name per node sharing a database).
    ///
    /// # Panics
    /// When called after the registry was cloned (builder methods come first).
    #[allow(clippy::expect_used)]
    pub fn with_node(mut self, node: impl Into<String>) -> Self {
        Arc::get_mut(&mut self.shared)
            .expect("the node is set before the registry is shared")
            .node = node.into();
        self
    }

    /// This registry's name as a lease owner (`server.node_id`, or host, process, instance).
    pub fn node(&self) -> &str {
        &self.shared.node
    }

    /// Sets restart, snapshot and passivation rules.
    ///
    /// # Panics
    /// When called after the registry was cloned (builder methods come first).
    #[allow(clippy::expect_used)]
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

    /// Runs session `id` with `agent` instead of its row's configured agent, from its next
    /// activation on (an evaluation's session, before its first input).
    pub fn set_session_agent(&self, id: Uuid, agent: Arc<Agent>) {
        self.shared
            .session_agents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, agent);
    }

    /// Forgets the agent set for session `id`.
    pub fn clear_session_agent(&self, id: Uuid) {
        self.shared
            .session_agents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }

    /// Tells this node's scheduler that a due-index row was written (an agent's schedule
    /// created over REST), so it looks at once instead of at its next poll.
    pub fn due_changed(&self) {
        self.shared.due_changed.notify_one();
    }

    /// Whether the session has a live actor now (not passivated).
    pub fn is_live(&self, id: Uuid) -> bool {
        self.shared.live_actor(id).is_some()
    }

    /// The session's actor, activating it from the journal when it is not live.
    pub async fn session(&self, id: Uuid) -> Result<ActorRef<SessionMsg>, SessionError> {
        self.shared.activate(id).await
    }

    /// Actors the registry holds now (without pruning: stopped actors are forgotten as the
    /// supervisor hears of their end).
    pub fn live_count(&self) -> usize {
        self.shared
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Forgets every actor that has stopped (passivated sessions cost nothing here).
    pub fn prune(&self) -> usize {
        let mut live = self
            .shared
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        live.retain(|_, a| {
            !matches!(
                a.get_status(),
                ractor::ActorStatus::Stopping | ractor::ActorStatus::Stopped
            )
        });
        live.len()
    }

    /// Sends an input and waits until its events are committed. An input that meets a
    /// passivating or stopping actor and is not applied (refused, not delivered, or dropped
    /// from the mailbox untaken as the actor ended) goes to a fresh activation.
    pub async fn send(&self, id: Uuid, input: Input) -> Result<i64, SessionError> {
        for _ in 0..PASSIVATION_RETRIES {
            let actor = self.session(id).await?;
            let taken = Arc::new(AtomicBool::new(false));
            let call =
                |reply| SessionMsg::Input(input.clone(), Some(Caller::new(reply, taken.clone())));
            // An input dropped with the mailbox of an ending actor was never taken; one taken
            // and never answered may have been applied (its events may be committed), so it
            // is not sent again.
            match Asked::of(actor.call(call, None).await, || {
                !taken.load(Ordering::SeqCst)
            }) {
                Asked::Answered(Err(SessionError::Passivating)) | Asked::NotTaken => {}
                Asked::Answered(result) => return result,
                Asked::Stopped => return Err(SessionError::Stopped),
            }
            self.wait_until_stopped(id, &actor).await;
        }
        Err(SessionError::KeptPassivating)
    }

    /// Waits (briefly) for a passivating actor to finish, so the next activation is a new one.
    async fn wait_until_stopped(&self, id: Uuid, actor: &ActorRef<SessionMsg>) {
        for _ in 0..200 {
            if matches!(actor.get_status(), ractor::ActorStatus::Stopped) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let _ = self.shared.live_actor(id); // forgets it once stopped
    }

    /// Attaches a subscriber that may fall `capacity` frames behind before it is dropped.
    pub async fn attach(&self, id: Uuid, capacity: usize) -> Result<Subscription, SessionError> {
        for _ in 0..PASSIVATION_RETRIES {
            let actor = self.session(id).await?;
            let (sender, frames) = tokio::sync::mpsc::channel(capacity.max(1));
            let lagged = Arc::new(AtomicBool::new(false));
            let subscriber = Subscriber {
                sender,
                lagged: lagged.clone(),
            };
            let asked = actor
                .call(|reply| SessionMsg::Subscribe(subscriber, reply), None)
                .await;
            // A passivating actor drops the request unanswered, or refuses delivery.
            match Asked::of(asked, || !running(&actor)) {
                Asked::Answered(attached) => {
                    return Ok(Subscription {
                        frames,
                        attached,
                        lagged,
                    })
                }
                Asked::NotTaken => self.wait_until_stopped(id, &actor).await,
                Asked::Stopped => return Err(SessionError::Stopped),
            }
        }
        Err(SessionError::KeptPassivating)
    }

    /// Frames from now on (a generous buffer, for in-process callers and tests).
    pub async fn subscribe(
        &self,
        id: Uuid,
    ) -> Result<tokio::sync::mpsc::Receiver<SharedFrame>, SessionError> {
        Ok(self.attach(id, 65_536).await?.frames)
    }

    pub async fn state(&self, id: Uuid) -> Result<SessionState, SessionError> {
        for _ in 0..PASSIVATION_RETRIES {
            let actor = self.session(id).await?;
            match Asked::of(actor.call(SessionMsg::State, None).await, || {
                !running(&actor)
            }) {
                Asked::Answered(state) => return Ok(state),
                Asked::NotTaken => self.wait_until_stopped(id, &actor).await,
                Asked::Stopped => return Err(SessionError::Stopped),
            }
        }
        Err(SessionError::KeptPassivating)
    }

    /// Stops the session's live actor (if any) for good — no later access activates it again
    /// (a purge: the session is about to be deleted) — and waits until it has stopped.
    pub async fn retire(&self, id: Uuid) {
        self.shared
            .retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id);
        // Under its activation lock: an activation in progress finishes first, none starts.
        let lock = self.shared.activation_lock(id);
        let _guard = lock.lock().await;
        self.stop(id).await;
    }

    /// Stops the session's live actor (if any) and waits until it has stopped.
    pub async fn stop(&self, id: Uuid) {
        let actor = self
            .shared
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        if let Some(actor) = actor {
            let _ = actor
                .stop_and_wait(
                    Some("purged".into()),
                    Some(std::time::Duration::from_secs(10)),
                )
                .await;
        }
    }

    /// Stops every live actor and waits (up to `grace`) until each has stopped and released
    /// its lease, so another node can take its session at once (a draining shutdown). A
    /// session that was mid-turn is taken over by that node's sweep, under the recovery rules.
    pub async fn passivate_all(&self, grace: std::time::Duration) {
        let actors: Vec<_> = self
            .shared
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, actor)| actor)
            .collect();
        let stops = actors.into_iter().map(|actor| async move {
            let _ = actor
                .stop_and_wait(Some("the node is draining".into()), Some(grace))
                .await;
        });
        futures_util::future::join_all(stops).await;
    }

    /// Stops every live actor (what a process exit does to them).
    pub fn stop_all(&self) {
        for (_, actor) in self
            .shared
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
        {
            actor.stop(None);
        }
    }
}

/// How one call to a session actor ended.
enum Asked<T> {
    Answered(T),
    /// The actor did not take the request (not delivered, or dropped unanswered with the
    /// mailbox of an actor that is ending): it may go to a fresh activation.
    NotTaken,
    /// The actor took the request and stopped before answering.
    Stopped,
}

impl<T> Asked<T> {
    /// `untaken` tells, for a request that was not answered, whether the actor surely did not
    /// take it (each caller knows how: a flag the actor sets, or the actor no longer running).
    fn of(
        result: Result<ractor::rpc::CallResult<T>, ractor::MessagingErr<SessionMsg>>,
        untaken: impl Fn() -> bool,
    ) -> Self {
        match result {
            Ok(ractor::rpc::CallResult::Success(answer)) => Asked::Answered(answer),
            Ok(ractor::rpc::CallResult::SenderError)
            | Err(ractor::MessagingErr::SendErr(_))
            | Err(ractor::MessagingErr::ChannelClosed)
                if untaken() =>
            {
                Asked::NotTaken
            }
            _ => Asked::Stopped,
        }
    }
}

fn running(actor: &ActorRef<SessionMsg>) -> bool {
    matches!(actor.get_status(), ractor::ActorStatus::Running)
}

//! The scheduler (docs/schedules.md): one task per node that sleeps until the due index's
//! earliest row (or `poll` at most, to see rows other nodes wrote, or until an actor of this
//! node writes one), then wakes the sessions whose rows are due by sending them an input —
//! `SchedulesDue` or `ApprovalExpired` — through the registry, which activates a passivated
//! session under its lease. Whether anything fires is the session actor's decision over its
//! journal, so a row seen by two nodes, or seen again after a crash, fires once. An agent's
//! schedule starts a session per occurrence in idempotent steps (`crate::agent_schedules`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use stead_model::CallId;

use chrono::{DateTime, Utc};
use stead_persistence::{ScheduleOwner, ScheduleRow};
use uuid::Uuid;

use stead_persistence::{NewEvent, NewSession};

use super::due_index::approval_call;
use super::{SessionError, SessionRegistry};
use crate::agent_schedules::{occurrence_client_id, occurrence_session, AgentSchedule};
use crate::agent_tool::{child_call, PARENT_CANCEL_KEY};
use crate::decide::{Input, Refusal};
use crate::events::SessionEvent;
use crate::schedules::{occurrences, Firing, Occurrence, Occurrences};

/// What "now" is to the scheduler (tests inject a clock and drive passes with
/// [`Scheduler::run_due`]).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

#[derive(Clone)]
pub struct SchedulerOptions {
    /// The longest sleep between two looks at the due index.
    pub poll: Duration,
    /// Rows taken per pass.
    pub batch: u32,
    /// Sessions woken at once.
    pub concurrency: usize,
    pub clock: Clock,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            poll: Duration::from_secs(1),
            batch: 512,
            concurrency: 64,
            clock: Arc::new(Utc::now),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// Due rows read.
    pub due: usize,
    /// Sessions woken whose decision journaled something (a firing, an expiry, a skip).
    pub fired: usize,
    /// Sessions put off (held by another node, busy, the database failing).
    pub deferred: usize,
}

pub struct Scheduler {
    registry: SessionRegistry,
    options: SchedulerOptions,
    /// Sessions (by id) and agents' schedules (`agent:{name}/{key}`) not to try again before
    /// an instant (they were held elsewhere, busy or failing).
    deferred: Mutex<HashMap<String, Instant>>,
}

enum Woken {
    Fired,
    Nothing,
    Deferred(Duration),
}

impl Scheduler {
    pub fn new(registry: SessionRegistry, options: SchedulerOptions) -> Arc<Self> {
        Arc::new(Scheduler {
            registry,
            options,
            deferred: Mutex::new(HashMap::new()),
        })
    }

    /// Runs passes for as long as the task lives.
    pub fn spawn(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move { me.run().await })
    }

    async fn run(&self) {
        let changed = self.registry.shared.due_changed.clone();
        loop {
            // Registered before the pass, so a row written during it is not missed.
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let pass = match self.run_due().await {
                Ok(pass) => pass,
                Err(error) => {
                    tracing::warn!(%error, "scheduler: the due index could not be read");
                    Pass::default()
                }
            };
            if pass.due >= self.options.batch as usize && pass.deferred < pass.due {
                continue; // more rows are due
            }
            let wait = self.wait(pass).await;
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = notified => {}
            }
        }
    }

    /// How long to sleep: until the earliest row, at most `poll`; when what is due was put
    /// off, until the first deferral ends.
    async fn wait(&self, pass: Pass) -> Duration {
        let poll = self.options.poll;
        let next = match self.registry.shared.store.next_schedule_due().await {
            Ok(Some(next)) => next,
            Ok(None) => return poll,
            Err(_) => return poll,
        };
        let until = (next - (self.options.clock)())
            .to_std()
            .unwrap_or(Duration::ZERO);
        if until > Duration::ZERO || pass.deferred == 0 {
            return until.min(poll);
        }
        let now = Instant::now();
        let deferred = self.deferred.lock().unwrap_or_else(PoisonError::into_inner);
        deferred
            .values()
            .map(|at| at.saturating_duration_since(now))
            .min()
            .unwrap_or(poll)
            .clamp(Duration::from_millis(10), poll)
    }

    /// One pass at the clock's now: every session with due rows is woken (up to
    /// `concurrency` at once) and waited for.
    pub async fn run_due(&self) -> Result<Pass, stead_persistence::Error> {
        let now = (self.options.clock)();
        let rows = self
            .registry
            .shared
            .store
            .due_schedules(now, self.options.batch)
            .await?;
        let mut pass = Pass {
            due: rows.len(),
            ..Pass::default()
        };
        let mut sessions: BTreeMap<Uuid, Vec<ScheduleRow>> = BTreeMap::new();
        let mut agents: Vec<ScheduleRow> = Vec::new();
        for row in rows {
            match row.owner {
                ScheduleOwner::Session(id) => sessions.entry(id).or_default().push(row),
                ScheduleOwner::Agent { .. } => agents.push(row),
            }
        }
        {
            let instant = Instant::now();
            let mut deferred = self.deferred.lock().unwrap_or_else(PoisonError::into_inner);
            deferred.retain(|_, until| *until > instant);
            sessions.retain(|id, _| {
                let skip = deferred.contains_key(&id.to_string());
                pass.deferred += usize::from(skip);
                !skip
            });
            agents.retain(|row| {
                let skip = deferred.contains_key(&agent_task(row));
                pass.deferred += usize::from(skip);
                !skip
            });
        }
        let limit = Arc::new(tokio::sync::Semaphore::new(self.options.concurrency.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        for (id, rows) in sessions {
            let registry = self.registry.clone();
            let limit = limit.clone();
            tasks.spawn(async move {
                let _permit = limit.acquire_owned().await;
                (id.to_string(), wake(&registry, id, &rows, now).await)
            });
        }
        for row in agents {
            let registry = self.registry.clone();
            let limit = limit.clone();
            tasks.spawn(async move {
                let _permit = limit.acquire_owned().await;
                (agent_task(&row), fire_agent(&registry, &row, now).await)
            });
        }
        while let Some(joined) = tasks.join_next().await {
            let Ok((id, woken)) = joined else { continue };
            match woken {
                Woken::Fired => pass.fired += 1,
                Woken::Nothing => {}
                Woken::Deferred(wait) => {
                    pass.deferred += 1;
                    self.deferred
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(id, Instant::now() + wait);
                }
            }
        }
        Ok(pass)
    }
}

/// Sends a session the inputs its due rows call for.
async fn wake(
    registry: &SessionRegistry,
    id: Uuid,
    rows: &[ScheduleRow],
    now: DateTime<Utc>,
) -> Woken {
    let mut inputs: Vec<Input> = rows
        .iter()
        .filter_map(|row| approval_call(&row.key))
        .map(|call_id| Input::ApprovalExpired {
            call_id: CallId::new(call_id.to_string()),
        })
        .collect();
    inputs.extend(
        rows.iter()
            .filter_map(|row| child_call(&row.key))
            .map(|call_id| Input::ChildFinished {
                call_id: CallId::new(call_id.to_string()),
            }),
    );
    let cancels = rows.iter().any(|row| row.key == PARENT_CANCEL_KEY);
    if cancels {
        inputs.push(Input::Cancel {
            reason: "the parent's call was cancelled".into(),
        });
    }
    if rows.iter().any(|row| {
        approval_call(&row.key).is_none()
            && child_call(&row.key).is_none()
            && row.key != PARENT_CANCEL_KEY
    }) {
        inputs.push(Input::SchedulesDue { now });
    }
    let mut fired = false;
    for input in inputs {
        match registry.send(id, input).await {
            Ok(_) => fired = true,
            // Nothing of it stands in the journal any more (fired, decided, cancelled, ended):
            // the actor mended its rows.
            Err(SessionError::Refused(Refusal::QueueFull)) => {
                return Woken::Deferred(Duration::from_secs(1))
            }
            // Over its hourly firings: not woken again before one is free.
            Err(SessionError::Refused(Refusal::FiringLimit(until))) => {
                let wait = (until - now).to_std().unwrap_or_default();
                return Woken::Deferred(wait.max(Duration::from_secs(1)));
            }
            Err(SessionError::Refused(_)) => {}
            Err(SessionError::NotFound) => {
                for row in rows {
                    let _ = registry
                        .shared
                        .store
                        .delete_schedule(&row.owner, &row.key)
                        .await;
                }
                return Woken::Nothing;
            }
            // Another node holds the session: it fires there (or here, once its lease ends).
            Err(SessionError::HeldElsewhere(_)) => return Woken::Deferred(Duration::from_secs(1)),
            Err(SessionError::UnknownAgent(agent)) => {
                tracing::warn!(session = %id, agent, "scheduler: the session's agent is not configured");
                return Woken::Deferred(Duration::from_secs(60));
            }
            Err(error) => {
                tracing::warn!(session = %id, %error, "scheduler: the session could not be woken");
                return Woken::Deferred(Duration::from_secs(1));
            }
        }
    }
    if cancels {
        // Delivered (or there was nothing left to cancel): the row's work is done.
        let owner = ScheduleOwner::Session(id);
        let _ = registry
            .shared
            .store
            .delete_schedule(&owner, PARENT_CANCEL_KEY)
            .await;
    }
    if fired {
        Woken::Fired
    } else {
        Woken::Nothing
    }
}

/// The deferral key of an agent's schedule.
fn agent_task(row: &ScheduleRow) -> String {
    format!("{}/{}", row.owner.column(), row.key)
}

/// Starts the sessions of an agent's schedule's due occurrences, advancing its row by
/// compare-and-set after each (docs/schedules.md, "Schedules that start sessions").
async fn fire_agent(registry: &SessionRegistry, row: &ScheduleRow, now: DateTime<Utc>) -> Woken {
    let store = &registry.shared.store;
    let Some((record, timing)) =
        AgentSchedule::from_row(row).and_then(|r| Some((r.clone(), r.due()?)))
    else {
        tracing::warn!(agent = %row.agent, key = %row.key, "scheduler: an agent's schedule this version cannot read is left alone");
        return Woken::Deferred(Duration::from_secs(3600));
    };
    let mut from = row.next_due_at;
    let firings = match occurrences(&timing, record.schedule.catch_up, from, now) {
        Occurrences::Fire(firings) => firings,
        Occurrences::Skip { next_due_at, .. } => {
            if let Err(error) = store
                .advance_schedule(&row.owner, &row.key, from, next_due_at)
                .await
            {
                tracing::warn!(agent = %row.agent, key = %row.key, %error, "scheduler: a skip could not be recorded");
                return Woken::Deferred(Duration::from_secs(1));
            }
            return Woken::Nothing;
        }
    };
    let mut fired = false;
    for firing in firings {
        if let Err(woken) = start_occurrence(registry, row, &record, firing).await {
            return woken;
        }
        match store
            .advance_schedule(&row.owner, &row.key, from, firing.next_due_at)
            .await
        {
            Ok(true) => fired = true,
            // Another node advanced it (its session is the same one), or it was redefined.
            Ok(false) => break,
            Err(error) => {
                tracing::warn!(agent = %row.agent, key = %row.key, %error, "scheduler: an agent's schedule could not be advanced");
                return Woken::Deferred(Duration::from_secs(1));
            }
        }
        match firing.next_due_at {
            Some(next) => from = next,
            None => break,
        }
    }
    if fired {
        Woken::Fired
    } else {
        Woken::Nothing
    }
}

/// The occurrence's session, created if it is not yet (its id is the occurrence's), with the
/// schedule's message delivered once (its `client_id` is the occurrence's).
async fn start_occurrence(
    registry: &SessionRegistry,
    row: &ScheduleRow,
    record: &AgentSchedule,
    firing: Firing,
) -> Result<(), Woken> {
    let store = &registry.shared.store;
    let retry = |error: &dyn std::fmt::Display| {
        tracing::warn!(agent = %row.agent, key = %row.key, %error, "scheduler: an agent's occurrence could not start; trying again");
        Woken::Deferred(Duration::from_secs(1))
    };
    let Some(agent) = registry.agent(&row.agent) else {
        tracing::warn!(agent = %row.agent, key = %row.key, "scheduler: the schedule's agent is not configured");
        return Err(Woken::Deferred(Duration::from_secs(60)));
    };
    let occurrence = Occurrence {
        key: &row.key,
        due_at: firing.due_at,
        missed: firing.missed,
    };
    let text = match record
        .schedule
        .message
        .deliver(&agent.rules.callbacks, &occurrence)
    {
        Ok(text) => text,
        Err(why) => {
            // Its callback was removed from the configuration: the schedule cannot fire again.
            tracing::warn!(agent = %row.agent, key = %row.key, %why, "scheduler: an agent's schedule is deleted");
            let _ = store.delete_schedule(&row.owner, &row.key).await;
            return Err(Woken::Nothing);
        }
    };
    let id = occurrence_session(&row.owner, &row.key, record.created_at, firing.due_at);
    let metadata = serde_json::json!({
        "schedule": { "key": row.key, "due_at": firing.due_at, "missed": firing.missed }
    });
    let new = NewSession {
        // The schedule's project: whoever made it there reads the sessions it starts.
        project_id: row
            .owner
            .project()
            .unwrap_or(stead_persistence::DEFAULT_PROJECT),
        id: Some(id),
        agent: row.agent.clone(),
        metadata,
        parent: None,
    };
    if let Err(error) = store.create_session(new).await {
        // An earlier try (here or on another node) created it.
        if store.get_session(id).await.is_err() {
            return Err(retry(&error));
        }
    }
    let (kind, payload) = SessionEvent::SessionCreated {
        agent: row.agent.clone(),
        principal: record.principal.clone(),
        parent: None,
    }
    .to_parts();
    match store
        .append(id, 0, vec![NewEvent::new(kind, payload)])
        .await
    {
        Ok(_) | Err(stead_persistence::Error::Conflict { .. }) => {}
        Err(error) => return Err(retry(&error)),
    }
    let message = Input::UserMessage {
        text,
        client_id: Some(occurrence_client_id(&row.key, firing.due_at)),
        mode: None,
        attachments: Vec::new(),
    };
    match registry.send(id, message).await {
        // Delivered, or delivered by an earlier try; or the session was closed already.
        Ok(_)
        | Err(SessionError::Refused(Refusal::DuplicateClientId))
        | Err(SessionError::Refused(Refusal::Ended)) => Ok(()),
        Err(SessionError::HeldElsewhere(_)) => Err(Woken::Deferred(Duration::from_secs(1))),
        Err(error) => Err(retry(&error)),
    }
}

//! Supervision of session actors: the supervising actor they are linked to, restarts after a
//! backoff, and the journaled `session_failed` once an actor keeps failing.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::PoisonError;
use stead_persistence::NewEvent;
use uuid::Uuid;

use super::registry::Shared;
use super::SessionError;
use crate::events::SessionEvent;

/// The supervising actor: session actors are linked to it, so their failures arrive here.
pub(super) struct Supervisor;

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
        let Some(shared) = shared.upgrade() else {
            return Ok(());
        };
        let (cell, error) = match event {
            ractor::SupervisionEvent::ActorFailed(cell, error) => (cell, error),
            // Passivated, closed, fenced: forgotten at once, so that the registry holds live
            // actors only (a session never asked for again would otherwise keep its entry —
            // found by `stead bench chaos --fault none`, RSS growing over a soak).
            ractor::SupervisionEvent::ActorTerminated(cell, ..) => {
                shared.forget(cell.get_id());
                return Ok(());
            }
            _ => return Ok(()),
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
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
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
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let (times, not_before) = failures.entry(id).or_insert_with(|| (Vec::new(), now));
        times.retain(|t| now.duration_since(*t) < self.lifecycle.restart_window);
        times.push(now);
        let count = times.len() as u32;
        let backoff = self
            .lifecycle
            .restart_backoff
            .saturating_mul(1 << (count - 1).min(16))
            .min(self.lifecycle.restart_backoff_max);
        *not_before = now + backoff;
        count
    }

    /// Journals `session_failed` (no actor is live: activation is held off meanwhile).
    async fn fail(&self, id: Uuid, reason: &str, failures: u32) -> Result<(), SessionError> {
        let lock = self.activation_lock(id);
        let _guard = lock.lock().await;
        let lease = self.lease(id).await?;
        let row = self.store.get_session(id).await?;
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
        appended?;
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        Ok(())
    }
}

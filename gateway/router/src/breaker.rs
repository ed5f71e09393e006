//! The circuit breaker: a target that keeps failing cools down, shared by every route that
//! uses the same provider and model; after the cooldown one trial call goes through.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

// tokio's clock, so tests can pause and advance it.
use tokio::time::Instant;

/// A circuit breaker for one provider's model, shared by every route that uses it.
#[derive(Debug, Default)]
pub(crate) struct Breaker {
    state: Mutex<BreakerState>,
}

#[derive(Debug, Default)]
pub(crate) struct BreakerState {
    consecutive_failures: u32,
    open_until: Option<Instant>,
    /// After the cooldown, one call tries the target again; others keep skipping it until
    /// that trial ends.
    trial_running: bool,
}

/// An attempt the breaker let through. When it is the half-open trial, dropping it without an
/// outcome (the caller went away mid-attempt) frees the trial for the next call; otherwise
/// the target would stay closed to everyone for good.
pub(crate) struct Admission<'a> {
    trial: Option<&'a Breaker>,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if let Some(breaker) = self.trial {
            // After `success` or `failure` the trial is already over: this changes nothing.
            breaker
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .trial_running = false;
        }
    }
}

impl Breaker {
    /// May an attempt go to this target now? (Takes the half-open trial when it is due.)
    pub(crate) fn admit(&self) -> Option<Admission<'_>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.open_until {
            None => Some(Admission { trial: None }),
            Some(until) if Instant::now() < until => None,
            Some(_) if state.trial_running => None,
            Some(_) => {
                state.trial_running = true;
                Some(Admission { trial: Some(self) })
            }
        }
    }

    /// [`Breaker::admit`] for a caller that settles the attempt itself (tests).
    #[cfg(test)]
    pub(crate) fn allow(&self) -> bool {
        self.admit().map(std::mem::forget).is_some()
    }

    pub(crate) fn is_open(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.open_until.is_some_and(|until| Instant::now() < until) || state.trial_running
    }

    pub(crate) fn success(&self) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = BreakerState::default();
    }

    pub(crate) fn failure(&self, threshold: u32, cooldown: Duration) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.consecutive_failures += 1;
        if state.trial_running || state.consecutive_failures >= threshold {
            state.open_until = Some(Instant::now() + cooldown);
            state.trial_running = false;
            tracing::warn!(
                failures = state.consecutive_failures,
                cooldown_s = cooldown.as_secs_f64(),
                "a model target is cooling down"
            );
        }
    }
}

//! A route as the router holds it: its targets in order (or a weighted random order), each
//! with its provider, price and breaker, and the backoff between retries of one target.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use crate::breaker::Breaker;
use crate::config::{BackoffKind, Price, TargetConfig};
use crate::limits::{RequestRate, TokenRate};
use crate::provider::Provider;

pub(crate) struct Target {
    pub(crate) provider_name: String,
    /// `None`: configured but not available (an unprepared local model).
    pub(crate) provider: Option<Arc<dyn Provider>>,
    pub(crate) model: String,
    pub(crate) config: TargetConfig,
    pub(crate) breaker: Arc<Breaker>,
    pub(crate) price: Price,
    /// Whether its model sees images (`[[routes]] images`, else the provider's own answer).
    pub(crate) images: bool,
}

pub(crate) struct Route {
    pub(crate) targets: Vec<Target>,
    pub(crate) weighted: bool,
    pub(crate) cache: bool,
    pub(crate) requests: Option<RequestRate>,
    pub(crate) tokens: Option<TokenRate>,
    /// The guardrails its requests pass, in order (`[[routes]] guardrails`).
    pub(crate) guardrails: Vec<String>,
}

impl Route {
    /// The order to try the targets in: as configured, or a weighted random permutation.
    pub(crate) fn order(&self) -> Vec<&Target> {
        if !self.weighted {
            return self.targets.iter().collect();
        }
        let mut left: Vec<&Target> = self.targets.iter().collect();
        let mut order = Vec::with_capacity(left.len());
        let mut rng = rand::rng();
        while !left.is_empty() {
            let total: u64 = left
                .iter()
                .map(|t| t.config.weight.unwrap_or(1) as u64)
                .sum();
            let mut pick = rng.random_range(0..total);
            let mut index = 0;
            for (i, t) in left.iter().enumerate() {
                let weight = t.config.weight.unwrap_or(1) as u64;
                if pick < weight {
                    index = i;
                    break;
                }
                pick -= weight;
            }
            order.push(left.remove(index));
        }
        order
    }

    /// The most a call through this route may cost: every target's price at the request's
    /// token bounds.
    pub(crate) fn most_expensive(&self) -> Price {
        self.targets.iter().fold(Price::default(), |most, t| Price {
            input: most.input.max(t.price.input),
            output: most.output.max(t.price.output),
        })
    }
}

/// Whether a failed `attempt` of a target is tried again, and after how long: the failure
/// must be one the target's retry rules name, attempts must be left, and a `Retry-After` must
/// not exceed `max_retry_after_secs` (else the route moves on at once).
pub(crate) fn retry_wait(
    target: &TargetConfig,
    error: &crate::provider::ProviderError,
    attempt: u32,
) -> Option<Duration> {
    use crate::provider::FailureKind;
    let retry = &target.retry;
    let retryable = match error.kind {
        FailureKind::Status => retry.on_status.contains(&error.status.unwrap_or(0)),
        FailureKind::Invalid | FailureKind::Unavailable => false,
        ref kind => retry.on_errors.iter().any(|e| e == kind.as_str()),
    };
    if !retryable || attempt >= retry.attempts {
        return None;
    }
    match error.retry_after {
        Some(after) if after.as_secs_f64() > retry.max_retry_after_secs => None,
        Some(after) => Some(after),
        None => Some(backoff(target, attempt)),
    }
}

/// The wait before retry `attempt + 1`.
pub(crate) fn backoff(target: &TargetConfig, attempt: u32) -> Duration {
    let retry = &target.retry;
    let base = retry.base_ms as f64;
    let ms = match retry.backoff {
        BackoffKind::Constant => base,
        BackoffKind::Linear => base * attempt as f64,
        BackoffKind::Exponential => base * 2f64.powi(attempt.saturating_sub(1) as i32),
    }
    .min(retry.max_ms as f64);
    let ms = if retry.jitter {
        rand::rng().random_range(0.0..=ms)
    } else {
        ms
    };
    Duration::from_secs_f64(ms / 1000.0)
}

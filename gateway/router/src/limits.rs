//! Limits on what callers may use: requests per minute (governor's GCRA, per API key and per
//! route), tokens per minute (a bucket that may go into debt, because a call's tokens are known
//! only after it), and strict cost budgets per key per window (a reservation of the most a call
//! can cost before it starts, reconciled with the real cost after).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::RouterErrorCode;

/// A refusal: which limit, and when to try again.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub code: RouterErrorCode,
    pub message: String,
    pub retry_after: Duration,
}

fn per_minute(n: u32) -> Quota {
    Quota::per_minute(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
}

/// Requests per minute for one key space.
pub enum RequestRate {
    Keyed(DefaultKeyedRateLimiter<String>),
    Direct(DefaultDirectRateLimiter),
}

impl RequestRate {
    pub fn keyed(per_min: u32) -> Self {
        RequestRate::Keyed(RateLimiter::keyed(per_minute(per_min)))
    }

    pub fn direct(per_min: u32) -> Self {
        RequestRate::Direct(RateLimiter::direct(per_minute(per_min)))
    }

    /// Takes one request, or says how long until one is allowed.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        let clock = DefaultClock::default();
        let result = match self {
            RequestRate::Keyed(limiter) => limiter.check_key(&key.to_string()),
            RequestRate::Direct(limiter) => limiter.check(),
        };
        result.map_err(|not_until| not_until.wait_time_from(clock.now()))
    }
}

/// Tokens per minute: refills continuously at `per_min / 60 s` up to `per_min`; a call may start
/// while the balance is positive and its tokens are taken after it, so the balance can go
/// negative (the next calls wait for it to refill).
#[derive(Debug)]
pub struct TokenRate {
    per_min: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl TokenRate {
    pub fn new(per_min: u64) -> Self {
        TokenRate {
            per_min: per_min as f64,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn refilled(&self, balance: f64, since: Instant, now: Instant) -> f64 {
        let refill = now.duration_since(since).as_secs_f64() * self.per_min / 60.0;
        (balance + refill).min(self.per_min)
    }

    /// May a call start now?
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let (balance, since) = buckets
            .entry(key.to_string())
            .or_insert((self.per_min, now));
        let current = self.refilled(*balance, *since, now);
        *balance = current;
        *since = now;
        if current > 0.0 {
            Ok(())
        } else {
            // Until the balance is back above zero.
            let secs = (-current + 1.0) * 60.0 / self.per_min;
            Err(Duration::from_secs_f64(secs))
        }
    }

    /// Takes a finished call's tokens.
    pub fn consume(&self, key: &str, tokens: u64) {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let (balance, since) = buckets
            .entry(key.to_string())
            .or_insert((self.per_min, now));
        *balance = self.refilled(*balance, *since, now) - tokens as f64;
        *since = now;
    }
}

/// A key's spending in the current window.
#[derive(Debug)]
struct Spending {
    window_start: Instant,
    spent: f64,
    reserved: f64,
}

/// A budget a call charged to a key must fit besides the installation's: a virtual key's own
/// or its project's (docs/tenancy.md), kept in the shared ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetLimit {
    /// The ledger's key (`budget:key:{id}`, `budget:project:{id}`).
    pub key: String,
    /// How a refusal names it (``key `ci` ``).
    pub name: String,
    pub usd: f64,
    pub window: Duration,
    /// Once what is spent in a window reaches this (USD), the budget's alert is sent — once per
    /// window, by whichever node settles the call that crossed it (`None`: no alert).
    pub alert_usd: Option<f64>,
}

/// A budget whose spending reached its alert share in the current window.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetAlert {
    /// The ledger's key (`budget:key:{id}`, `budget:project:{id}`).
    pub key: String,
    /// ``key `ci` ``, ``project `acme` ``.
    pub name: String,
    pub usd: f64,
    pub alert_usd: f64,
    /// Spent in the window when it was crossed.
    pub spent: f64,
    pub window_start: chrono::DateTime<chrono::Utc>,
}

/// Where budget alerts go (the edge's webhook).
#[async_trait::async_trait]
pub trait BudgetAlerts: Send + Sync {
    async fn crossed(&self, alert: BudgetAlert);
}

/// The window of a budget that never starts again (one without a period).
pub const NO_RESET: Duration = Duration::from_secs(100 * 365 * 86_400);

/// A key's own requests and tokens per minute (a virtual key's `rpm` and `tpm`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyRates {
    pub requests_per_min: Option<u32>,
    pub tokens_per_min: Option<u64>,
}

/// Who says which budgets and rates a key has beyond the installation's.
#[async_trait::async_trait]
pub trait BudgetDirectory: Send + Sync {
    /// The budgets a call charged to `api_key` (the router's limits key) must fit; empty when
    /// it has none.
    async fn budgets(&self, api_key: &str) -> Result<Vec<BudgetLimit>, LedgerError>;

    /// The key's own requests and tokens per minute (none by default).
    async fn rates(&self, _api_key: &str) -> Result<KeyRates, LedgerError> {
        Ok(KeyRates::default())
    }
}

/// Why the shared budget ledger could not answer (its store's own error, kept as the source).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct LedgerError(pub Box<dyn std::error::Error + Send + Sync>);

/// A budget ledger kept outside this process — the database the nodes of a cluster share
/// (docs/cluster.md) — so that the budget holds whichever node serves.
#[async_trait::async_trait]
pub trait SharedLedger: Send + Sync {
    /// Sets `amount` aside for `key` when it fits `budget` per `window`; `Err`: the ledger
    /// cannot be reached (the call is refused: a budget is never overspent).
    async fn reserve(
        &self,
        key: &str,
        amount: f64,
        budget: f64,
        window: Duration,
    ) -> Result<SharedReservation, LedgerError>;

    /// Ends a reservation with what its call really cost.
    async fn settle(&self, id: uuid::Uuid, cost: f64);

    /// Marks `key`'s current window as alerted if it has spent at least `threshold` and was
    /// not marked yet; answers what it spent and when the window started to the one caller
    /// that marked it (`None` to everyone else). A ledger without alerts answers `None`.
    async fn alert_once(
        &self,
        _key: &str,
        _threshold: f64,
    ) -> Result<Option<(f64, chrono::DateTime<chrono::Utc>)>, LedgerError> {
        Ok(None)
    }
}

/// What a shared reservation came to.
#[derive(Debug, Clone, PartialEq)]
pub enum SharedReservation {
    Reserved(uuid::Uuid),
    Refused {
        spent: f64,
        reserved: f64,
        /// Until the window starts again.
        retry_after: Duration,
    },
}

/// Strict per-key budgets: the sum of what is spent and what running calls may still spend
/// never exceeds the budget, however many calls arrive at once — on this node, or on every
/// node of a cluster with a [`SharedLedger`].
pub struct Budgets {
    budget: f64,
    window: Duration,
    keys: Mutex<HashMap<String, Spending>>,
    shared: Option<Arc<dyn SharedLedger>>,
}

/// Money set aside for one call; hand it back with [`Budgets::settle`].
#[derive(Debug)]
pub struct Reservation {
    key: String,
    amount: f64,
    /// The reservation's id in the shared ledger.
    shared: Option<uuid::Uuid>,
}

impl Budgets {
    pub fn new(budget: f64, window: Duration) -> Self {
        Budgets {
            budget,
            window,
            keys: Mutex::new(HashMap::new()),
            shared: None,
        }
    }

    /// Keeps the ledger in `shared` instead of this process.
    pub fn shared(mut self, shared: Arc<dyn SharedLedger>) -> Self {
        self.shared = Some(shared);
        self
    }

    fn refused(&self, spent: f64, reserved: f64, amount: f64, retry_after: Duration) -> Refused {
        Refused {
            code: RouterErrorCode::BudgetExceeded,
            message: format!(
                "the budget of {} USD per {} s is spent or reserved (spent {:.6}, reserved \
                 {:.6}; this call may cost up to {:.6})",
                self.budget,
                self.window.as_secs(),
                spent,
                reserved,
                amount
            ),
            retry_after: retry_after.max(Duration::from_secs(1)),
        }
    }

    /// Sets `amount` aside for `key`, or refuses when it does not fit what is left.
    pub async fn reserve(&self, key: &str, amount: f64) -> Result<Reservation, Refused> {
        let Some(shared) = &self.shared else {
            return self.reserve_here(key, amount);
        };
        match shared.reserve(key, amount, self.budget, self.window).await {
            Ok(SharedReservation::Reserved(id)) => Ok(Reservation {
                key: key.to_string(),
                amount,
                shared: Some(id),
            }),
            Ok(SharedReservation::Refused {
                spent,
                reserved,
                retry_after,
            }) => Err(self.refused(spent, reserved, amount, retry_after)),
            Err(problem) => Err(Refused {
                code: RouterErrorCode::Unavailable,
                message: format!(
                    "the shared budget ledger cannot be reached ({problem}); the call is \
                     refused so that the budget is never overspent"
                ),
                retry_after: Duration::from_secs(1),
            }),
        }
    }

    fn reserve_here(&self, key: &str, amount: f64) -> Result<Reservation, Refused> {
        let now = Instant::now();
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let spending = keys.entry(key.to_string()).or_insert(Spending {
            window_start: now,
            spent: 0.0,
            reserved: 0.0,
        });
        if now.duration_since(spending.window_start) >= self.window {
            spending.window_start = now;
            spending.spent = 0.0;
        }
        // A tiny tolerance, so that ten reservations of a tenth fit a budget of one.
        if spending.spent + spending.reserved + amount > self.budget * (1.0 + 1e-9) {
            let retry_after = self
                .window
                .saturating_sub(now.duration_since(spending.window_start));
            return Err(self.refused(spending.spent, spending.reserved, amount, retry_after));
        }
        spending.reserved += amount;
        Ok(Reservation {
            key: key.to_string(),
            amount,
            shared: None,
        })
    }

    /// Releases a reservation and books what the call really cost (a shared one in the
    /// background: this runs where a dropped call is settled, which cannot wait).
    pub fn settle(&self, reservation: Reservation, cost: f64) {
        if let (Some(shared), Some(id)) = (&self.shared, reservation.shared) {
            let shared = shared.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(async move { shared.settle(id, cost).await });
                }
                // No runtime (the process is ending): the reservation stays until this node
                // is judged dead or starts again, and is then booked in full.
                Err(_) => tracing::warn!(reservation = %id, "budget reservation left unsettled"),
            }
            return;
        }
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(spending) = keys.get_mut(&reservation.key) {
            spending.reserved = (spending.reserved - reservation.amount).max(0.0);
            spending.spent += cost;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_refuse_what_would_overspend_and_settle_to_the_real_cost() {
        let budgets = Budgets::new(1.0, Duration::from_secs(60));
        let held: Vec<_> = (0..10)
            .map(|_| budgets.reserve_here("k", 0.1).expect("fits"))
            .collect();
        let refused = budgets.reserve_here("k", 0.1).unwrap_err();
        assert_eq!(refused.code, "budget_exceeded");
        assert!(refused.retry_after > Duration::ZERO);
        // Another key has its own budget.
        budgets.reserve_here("other", 1.0).expect("other key");
        // Settling at a lower cost frees the difference.
        for r in held {
            budgets.settle(r, 0.05);
        }
        let again: Vec<_> = (0..10).map(|_| budgets.reserve_here("k", 0.05)).collect();
        assert!(again.iter().all(Result::is_ok));
        assert!(budgets.reserve_here("k", 0.05).is_err());
    }

    #[test]
    fn token_rate_allows_a_call_while_positive_and_then_waits_for_the_debt() {
        let rate = TokenRate::new(600);
        assert!(rate.check("k").is_ok());
        rate.consume("k", 900);
        let wait = rate.check("k").unwrap_err();
        // 300 tokens of debt at 10 tokens/s: about 30 s.
        assert!(
            wait > Duration::from_secs(29) && wait < Duration::from_secs(32),
            "{wait:?}"
        );
        assert!(rate.check("other").is_ok());
    }

    #[test]
    fn request_rate_refuses_past_the_quota_with_a_wait() {
        let rate = RequestRate::keyed(2);
        assert!(rate.check("k").is_ok());
        assert!(rate.check("k").is_ok());
        let wait = rate.check("k").unwrap_err();
        assert!(wait > Duration::from_secs(20), "{wait:?}");
        assert!(rate.check("j").is_ok());
    }
}

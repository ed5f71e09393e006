//! A call's budgets together (docs/tenancy.md): the installation's per-key budget
//! (`[gateway.limits] budget_usd`) and the budgets a [`BudgetDirectory`] names for the caller's
//! key — a virtual key's own and its project's — kept in the shared ledger (the database), so
//! that they hold across restarts and on every node. A call sets the most it may cost aside in
//! every one of them or in none; it is refused with `budget_exceeded` naming the budget that
//! did not fit.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::limits::{
    BudgetAlert, BudgetAlerts, BudgetDirectory, BudgetLimit, Reservation, SharedLedger,
    SharedReservation,
};
use crate::{RefusedBudget, Router, RouterError, RouterErrorCode};

/// Where the budgets beyond the installation's come from, and the ledger that holds them.
#[derive(Clone)]
pub(crate) struct Directory {
    pub(crate) budgets: Arc<dyn BudgetDirectory>,
    pub(crate) ledger: Arc<dyn SharedLedger>,
    pub(crate) alerts: Option<Arc<dyn BudgetAlerts>>,
}

/// What one call set aside: in the installation's budget, and in each of the key's others.
#[derive(Debug, Default)]
pub(crate) struct CallReservation {
    global: Option<Reservation>,
    /// Each reservation in the ledger, with the budget it was made in.
    limits: Vec<(Uuid, BudgetLimit)>,
    amount: f64,
}

impl CallReservation {
    /// The most the call may cost (what an abandoned call is charged).
    pub(crate) fn amount(&self) -> f64 {
        self.amount
    }
}

/// What a call has set aside while it is still reserving in its other budgets: dropped there
/// (the caller went away between two reservations, or one refused), it hands all of it back.
struct Reserving<'a> {
    router: &'a Router,
    held: CallReservation,
    /// Cleared once every budget fitted and the call owns the reservation.
    armed: bool,
}

impl Reserving<'_> {
    /// Every budget fitted: the reservation is the call's to settle.
    fn done(mut self) -> CallReservation {
        self.armed = false;
        std::mem::take(&mut self.held)
    }
}

impl Drop for Reserving<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.router
                .settle_budgets(std::mem::take(&mut self.held), 0.0);
        }
    }
}

pub(crate) fn refusal(
    id: Uuid,
    code: RouterErrorCode,
    message: String,
    retry: Duration,
) -> RouterError {
    RouterError {
        id,
        code,
        message,
        unquoted: None,
        retry_after: Some(retry.max(Duration::from_secs(1))),
        attempts: Vec::new(),
        budget: None,
    }
}

/// Sends `limit`'s alert if this settlement made its spending cross `threshold` first.
async fn alert(
    ledger: &dyn SharedLedger,
    alerts: &dyn BudgetAlerts,
    limit: BudgetLimit,
    threshold: f64,
) {
    match ledger.alert_once(&limit.key, threshold).await {
        Ok(Some((spent, window_start))) => {
            alerts
                .crossed(BudgetAlert {
                    key: limit.key,
                    name: limit.name,
                    usd: limit.usd,
                    alert_usd: threshold,
                    spent,
                    window_start,
                })
                .await
        }
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(budget = %limit.key, %error, "the budget's alert could not be checked")
        }
    }
}

/// A window as people say it: `86400 s` reads `1 day`.
fn period(window: Duration) -> String {
    let secs = window.as_secs();
    match secs {
        s if s >= crate::limits::NO_RESET.as_secs() => "in all".into(),
        s if s % 86_400 == 0 => format!("per {} day(s)", s / 86_400),
        s if s % 3_600 == 0 => format!("per {} hour(s)", s / 3_600),
        s => format!("per {s} s"),
    }
}

impl Router {
    /// The budgets `key` has beyond the installation's: none without a directory. A directory
    /// that cannot answer refuses the call (a budget is never overspent).
    pub(crate) async fn directory_budgets(
        &self,
        id: Uuid,
        key: &str,
    ) -> Result<Vec<BudgetLimit>, RouterError> {
        let Some(directory) = &self.directory else {
            return Ok(Vec::new());
        };
        directory.budgets.budgets(key).await.map_err(|problem| {
            refusal(
                id,
                RouterErrorCode::Unavailable,
                format!(
                    "the key's budgets cannot be read ({problem}); the call is refused so that \
                     no budget is overspent"
                ),
                Duration::from_secs(1),
            )
        })
    }

    /// Whether a call of `key` has any budget to reserve in (`limits` from
    /// [`Router::directory_budgets`]).
    pub(crate) fn budgeted(&self, limits: &[BudgetLimit]) -> bool {
        self.budgets.is_some() || !limits.is_empty()
    }

    /// Sets `amount` aside for `key` in the installation's budget and in each of `limits`; all
    /// of them or none. `grant`: a one-off overspend a person approved for this call, by which
    /// each of `limits` may be exceeded (not the installation's budget).
    pub(crate) async fn reserve_budgets(
        &self,
        id: Uuid,
        key: &str,
        amount: f64,
        limits: Vec<BudgetLimit>,
        grant: f64,
    ) -> Result<CallReservation, RouterError> {
        let mut reserving = Reserving {
            router: self,
            held: CallReservation {
                amount,
                ..Default::default()
            },
            armed: true,
        };
        if let Some(budgets) = &self.budgets {
            let reservation = budgets
                .reserve(key, amount)
                .await
                .map_err(|r| refusal(id, r.code, r.message, r.retry_after))?;
            reserving.held.global = Some(reservation);
        }
        let Some(directory) = &self.directory else {
            return Ok(reserving.done());
        };
        for limit in limits {
            let answer = directory
                .ledger
                .reserve(&limit.key, amount, limit.usd + grant, limit.window)
                .await;
            let error = match answer {
                Ok(SharedReservation::Reserved(reserved)) => {
                    reserving.held.limits.push((reserved, limit));
                    continue;
                }
                Ok(SharedReservation::Refused {
                    spent,
                    reserved,
                    retry_after,
                }) => RouterError {
                    budget: Some(Box::new(RefusedBudget {
                        key: limit.key.clone(),
                        name: limit.name.clone(),
                        usd: limit.usd,
                        spent,
                        reserved,
                        amount,
                    })),
                    ..refusal(
                        id,
                        RouterErrorCode::BudgetExceeded,
                        format!(
                            "the budget of {} ({} USD {}) is spent or reserved (spent \
                             {spent:.6}, reserved {reserved:.6}; this call may cost up to \
                             {amount:.6})",
                            limit.name,
                            limit.usd,
                            period(limit.window)
                        ),
                        retry_after,
                    )
                },
                Err(problem) => refusal(
                    id,
                    RouterErrorCode::Unavailable,
                    format!(
                        "the shared budget ledger cannot be reached ({problem}); the call is \
                         refused so that the budget is never overspent"
                    ),
                    Duration::from_secs(1),
                ),
            };
            // What was set aside in the other budgets goes back (`reserving` is dropped).
            return Err(error);
        }
        Ok(reserving.done())
    }

    /// Hands a call's reservations back, charging `cost` to each of its budgets.
    pub(crate) fn settle_budgets(&self, reservation: CallReservation, cost: f64) {
        if let (Some(budgets), Some(global)) = (&self.budgets, reservation.global) {
            budgets.settle(global, cost);
        }
        let Some(directory) = &self.directory else {
            return;
        };
        for (id, limit) in reservation.limits {
            let ledger = directory.ledger.clone();
            let alerts = directory.alerts.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(async move {
                        ledger.settle(id, cost).await;
                        if let (Some(alerts), Some(threshold)) = (alerts, limit.alert_usd) {
                            if cost > 0.0 {
                                alert(ledger.as_ref(), alerts.as_ref(), limit, threshold).await;
                            }
                        }
                    });
                }
                // No runtime (the process is ending): booked in full when the node is judged
                // dead or starts again.
                Err(_) => tracing::warn!(reservation = %id, "budget reservation left unsettled"),
            }
        }
    }
}

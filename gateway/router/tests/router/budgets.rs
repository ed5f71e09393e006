//! The budgets of keys and projects beyond the installation's (a directory of them, a shared
//! ledger): both hold under concurrent calls and name themselves when they refuse, a call
//! dropped between reservations leaves nothing reserved, a granted overspend admits one call,
//! and a budget alerts once when its spending crosses the share; a key's own requests and
//! tokens per minute hold beside them.

use super::*;
use stead_router::{
    BudgetDirectory, BudgetLimit, KeyRates, LedgerError, SharedLedger, SharedReservation, NO_RESET,
};

/// A shared ledger kept in memory (a test double of the database's).
#[derive(Default)]
struct MemoryLedger {
    state: std::sync::Mutex<MemoryState>,
    /// How long a reservation in a project's budget takes.
    project_delay: Duration,
}

#[derive(Default)]
struct MemoryState {
    spent: std::collections::HashMap<String, f64>,
    reservations: std::collections::HashMap<uuid::Uuid, (String, f64)>,
    /// Budgets whose (only) window was alerted.
    alerted: std::collections::HashSet<String>,
}

impl MemoryLedger {
    /// What `key` has spent and has reserved.
    fn of(&self, key: &str) -> (f64, f64) {
        let state = self.state.lock().unwrap();
        let reserved = state
            .reservations
            .values()
            .filter(|(k, _)| k == key)
            .map(|(_, a)| a)
            .sum();
        (state.spent.get(key).copied().unwrap_or(0.0), reserved)
    }
}

#[async_trait::async_trait]
impl SharedLedger for MemoryLedger {
    async fn reserve(
        &self,
        key: &str,
        amount: f64,
        budget: f64,
        _window: Duration,
    ) -> Result<SharedReservation, LedgerError> {
        if key.contains("project") {
            tokio::time::sleep(self.project_delay).await;
        }
        let mut state = self.state.lock().unwrap();
        let spent = state.spent.get(key).copied().unwrap_or(0.0);
        let reserved: f64 = state
            .reservations
            .values()
            .filter(|(k, _)| k == key)
            .map(|(_, a)| a)
            .sum();
        if spent + reserved + amount > budget * (1.0 + 1e-9) {
            return Ok(SharedReservation::Refused {
                spent,
                reserved,
                retry_after: Duration::from_secs(60),
            });
        }
        let id = uuid::Uuid::new_v4();
        state.reservations.insert(id, (key.to_string(), amount));
        Ok(SharedReservation::Reserved(id))
    }

    async fn settle(&self, id: uuid::Uuid, cost: f64) {
        let mut state = self.state.lock().unwrap();
        if let Some((key, _)) = state.reservations.remove(&id) {
            *state.spent.entry(key).or_default() += cost;
        }
    }

    async fn alert_once(
        &self,
        key: &str,
        threshold: f64,
    ) -> Result<Option<(f64, chrono::DateTime<chrono::Utc>)>, LedgerError> {
        let mut state = self.state.lock().unwrap();
        let spent = state.spent.get(key).copied().unwrap_or(0.0);
        if spent + 1e-12 < threshold || !state.alerted.insert(key.to_string()) {
            return Ok(None);
        }
        Ok(Some((spent, chrono::DateTime::UNIX_EPOCH)))
    }
}

/// The alerts sent (a test double of the edge's webhook).
#[derive(Default)]
struct Alerts(std::sync::Mutex<Vec<stead_router::BudgetAlert>>);

#[async_trait::async_trait]
impl stead_router::BudgetAlerts for Alerts {
    async fn crossed(&self, alert: stead_router::BudgetAlert) {
        self.0.lock().unwrap().push(alert);
    }
}

/// An upstream double whose every answer is ten completion tokens, after `delay`.
async fn ten_tokens(delay: Duration) -> Upstream {
    let reply = Reply::Text {
        text: "ten tokens".into(),
        delay,
        chunk_delay: Duration::ZERO,
        completion_tokens: 10,
    };
    Upstream::start(vec![], reply).await
}

/// Keys `k1` and `k2` of project `p` (a test double of the projects' directory).
struct Directory;

#[async_trait::async_trait]
impl BudgetDirectory for Directory {
    async fn budgets(&self, api_key: &str) -> Result<Vec<BudgetLimit>, LedgerError> {
        let limit = |key: &str, name: &str, usd: f64| BudgetLimit {
            key: key.into(),
            name: name.into(),
            usd,
            window: NO_RESET,
            // Alerts at 60 %.
            alert_usd: Some(usd * 0.6),
        };
        let project = limit("budget:project:p", "project `p`", 0.08);
        Ok(match api_key {
            "k1" => vec![limit("budget:key:k1", "key `k1`", 0.05), project],
            "k2" => vec![limit("budget:key:k2", "key `k2`", 1.0), project],
            _ => Vec::new(),
        })
    }

    async fn rates(&self, api_key: &str) -> Result<KeyRates, LedgerError> {
        Ok(match api_key {
            "k3" => KeyRates {
                requests_per_min: Some(2),
                tokens_per_min: None,
            },
            "k4" => KeyRates {
                requests_per_min: None,
                tokens_per_min: Some(5),
            },
            _ => KeyRates::default(),
        })
    }
}

/// Route `r` on `up` (a call of at most 10 tokens at $1000 per million: $0.01), with the
/// [`Directory`] double's budgets kept in `ledger`.
fn budgeted(up: &Upstream, ledger: Arc<MemoryLedger>) -> Arc<Router> {
    let s = router(
        &[("a", up)],
        json!([{ "name": "r", "targets": [{ "provider": "a", "model": "m", "max_tokens": 10 }] }]),
        json!({ "prices": { "m": { "input": 0.0, "output": 1000.0 } } }),
    );
    let router = Arc::try_unwrap(s.router).ok().unwrap();
    Arc::new(router.with_budget_directory(Arc::new(Directory), ledger))
}

/// A key's own budget and its project's both hold under concurrent calls: each call sets the
/// most it may cost aside in both or in neither, a refusal names the budget that did not fit,
/// and what a refused call set aside in the other budget goes back.
#[tokio::test]
async fn a_keys_budget_and_its_projects_both_hold_and_name_themselves() {
    let up = ten_tokens(Duration::from_millis(200)).await;
    // Each call may cost and costs $0.01.
    let ledger = Arc::new(MemoryLedger::default());
    let router = budgeted(&up, ledger.clone());
    let burst = |key: &'static str| {
        let router = router.clone();
        async move {
            let calls = (0..20).map(|i| {
                let router = router.clone();
                tokio::spawn(async move {
                    let options = CallOptions {
                        api_key: Some(key.into()),
                        ..Default::default()
                    };
                    router
                        .call(ask("r", &format!("{key} {i}")), options, None)
                        .await
                })
            });
            let results: Vec<_> = futures_util::future::join_all(calls)
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect();
            let refusals: Vec<String> = results
                .iter()
                .filter_map(|r| r.as_ref().err())
                .map(|e| {
                    assert_eq!(e.code, "budget_exceeded", "{}", e.message);
                    e.message.clone()
                })
                .collect();
            (results.len() - refusals.len(), refusals)
        }
    };
    let settled = |key: &'static str, spent: f64| {
        let ledger = ledger.clone();
        async move {
            for _ in 0..100 {
                let (s, r) = ledger.of(key);
                if (s - spent).abs() < 1e-9 && r == 0.0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("{key}: {:?}, wanted {spent} spent", ledger.of(key));
        }
    };

    // k1's own budget fits five calls.
    let (served, refusals) = burst("k1").await;
    assert_eq!(served, 5);
    assert!(
        refusals.iter().all(|m| m.contains("key `k1`")),
        "{refusals:?}"
    );
    settled("budget:key:k1", 0.05).await;
    settled("budget:project:p", 0.05).await;
    // k2 has room of its own, but the project has 0.03 left: three calls.
    let (served, refusals) = burst("k2").await;
    assert_eq!(served, 3);
    assert!(
        refusals.iter().all(|m| m.contains("project `p`")),
        "{refusals:?}"
    );
    settled("budget:project:p", 0.08).await;
    // The refused calls' reservations in k2's own budget went back.
    settled("budget:key:k2", 0.03).await;
    assert_eq!(up.requests().len(), 8);
    // A key the directory does not know has no budget here.
    let free = router
        .call(
            ask("r", "free"),
            CallOptions {
                api_key: Some("k3".into()),
                ..Default::default()
            },
            None,
        )
        .await;
    assert!(free.is_ok());
}

/// A call dropped while it reserves (its key's budget set aside, its project's still being
/// asked) hands back what it set aside.
#[tokio::test]
async fn a_call_dropped_between_two_reservations_leaves_nothing_reserved() {
    let up = Upstream::start(vec![], Reply::text("unused")).await;
    let ledger = Arc::new(MemoryLedger {
        project_delay: Duration::from_secs(5),
        ..Default::default()
    });
    let router = budgeted(&up, ledger.clone());
    let call = tokio::spawn({
        let router = router.clone();
        async move {
            let options = CallOptions {
                api_key: Some("k1".into()),
                ..Default::default()
            };
            router.call(ask("r", "dropped"), options, None).await
        }
    });
    // The key's budget is reserved at once; the project's takes five seconds.
    for _ in 0..100 {
        if ledger.of("budget:key:k1").1 > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        ledger.of("budget:key:k1").1 > 0.0,
        "the key's budget was reserved"
    );
    call.abort();
    let _ = call.await;
    for _ in 0..100 {
        if ledger.of("budget:key:k1") == (0.0, 0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ledger.of("budget:key:k1"), (0.0, 0.0));
    assert!(up.requests().is_empty());
}

/// A refusal by a key's budget carries that budget (what a session parks on), and a call
/// granted a one-off overspend fits that much past the budget, once.
#[tokio::test]
async fn a_refusal_names_its_budget_and_a_granted_overspend_admits_one_call() {
    let up = ten_tokens(Duration::ZERO).await;
    let ledger = Arc::new(MemoryLedger::default());
    let router = budgeted(&up, ledger.clone());
    let call = |grant: Option<f64>| {
        let router = router.clone();
        async move {
            let options = CallOptions {
                api_key: Some("k1".into()),
                budget_grant_usd: grant,
                ..Default::default()
            };
            router.call(ask("r", "spend"), options, None).await
        }
    };
    let settled = |spent: f64| {
        let ledger = ledger.clone();
        async move {
            for _ in 0..100 {
                let (s, r) = ledger.of("budget:key:k1");
                if (s - spent).abs() < 1e-9 && r.abs() < 1e-9 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("{:?}, wanted {spent} spent", ledger.of("budget:key:k1"));
        }
    };
    // Five calls of $0.01 fill k1's $0.05 (one at a time: each settles before the next).
    for i in 0..5 {
        assert!(call(None).await.is_ok(), "call {i}");
        settled(0.01 * f64::from(i + 1)).await;
    }
    let refused = call(None).await.unwrap_err();
    assert_eq!(refused.code, "budget_exceeded");
    let budget = refused.budget.expect("the refusing budget");
    assert_eq!(budget.key, "budget:key:k1");
    assert_eq!(budget.name, "key `k1`");
    assert!((budget.amount - 0.01).abs() < 1e-9, "{budget:?}");
    assert!((budget.shortfall() - 0.01).abs() < 1e-9, "{budget:?}");
    // A grant smaller than the shortfall does not fit; one as large does, once.
    let short = call(Some(0.005)).await.unwrap_err();
    assert_eq!(short.code, "budget_exceeded");
    assert!(call(Some(0.01)).await.is_ok());
    settled(0.06).await;
    let again = call(None).await.unwrap_err();
    assert!((again.budget.expect("refused").shortfall() - 0.02).abs() < 1e-9);
    assert_eq!(up.requests().len(), 6);
}

/// A budget's alert goes out once, when the call that crosses its share is settled: key `k1`
/// ($0.05, alert at $0.03) crosses it at its third $0.01 call, and later calls send nothing.
#[tokio::test]
async fn a_budget_alerts_once_when_its_spending_crosses_the_share() {
    let up = ten_tokens(Duration::ZERO).await;
    let ledger = Arc::new(MemoryLedger::default());
    let alerts = Arc::new(Alerts::default());
    let router = budgeted(&up, ledger.clone());
    let router = Arc::new(
        Arc::try_unwrap(router)
            .ok()
            .unwrap()
            .with_budget_alerts(alerts.clone()),
    );
    let sent = |alerts: &Alerts| alerts.0.lock().unwrap().clone();
    for i in 0..5 {
        let options = CallOptions {
            api_key: Some("k1".into()),
            ..Default::default()
        };
        assert!(router.call(ask("r", "spend"), options, None).await.is_ok());
        // Settling (and alerting) runs after the answer: wait until the call is booked.
        for _ in 0..100 {
            let (spent, _) = ledger.of("budget:key:k1");
            if (spent - 0.01 * f64::from(i + 1)).abs() < 1e-9 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let alerted: Vec<_> = sent(&alerts)
            .into_iter()
            .filter(|a| a.key == "budget:key:k1")
            .collect();
        match i {
            0 | 1 => assert!(alerted.is_empty(), "call {i}: {alerted:?}"),
            _ => {
                assert_eq!(alerted.len(), 1, "call {i}: {alerted:?}");
                assert_eq!(alerted[0].name, "key `k1`");
                assert!((alerted[0].alert_usd - 0.03).abs() < 1e-9);
                assert!((alerted[0].spent - 0.03).abs() < 1e-9, "{alerted:?}");
            }
        }
    }
}

/// A key's own rates from the directory: `k3` may make two calls a minute (the third is
/// refused naming the key, and another key is not held back); `k4`'s ten tokens take its
/// balance of five below zero, so its next call waits.
#[tokio::test]
async fn a_keys_own_requests_and_tokens_per_minute_hold() {
    let up = ten_tokens(Duration::ZERO).await;
    let router = budgeted(&up, Arc::new(MemoryLedger::default()));
    let call = |key: &'static str, n: usize| {
        let router = router.clone();
        async move {
            let options = CallOptions {
                api_key: Some(key.into()),
                ..Default::default()
            };
            router
                .call(ask("r", &format!("{key} {n}")), options, None)
                .await
        }
    };
    for n in 0..2 {
        call("k3", n).await.unwrap();
    }
    let refused = call("k3", 2).await.unwrap_err();
    assert_eq!(refused.code, "rate_limited");
    assert!(
        refused.message.contains("`k3`") && refused.message.contains("requests per minute"),
        "{}",
        refused.message
    );
    assert!(refused
        .retry_after
        .is_some_and(|wait| wait > Duration::ZERO));
    // Another key (with no rates of its own) is not held back.
    for n in 0..3 {
        call("k2", n).await.unwrap();
    }
    call("k4", 0).await.unwrap();
    let refused = call("k4", 1).await.unwrap_err();
    assert_eq!(refused.code, "rate_limited");
    assert!(
        refused.message.contains("tokens per minute"),
        "{}",
        refused.message
    );
}

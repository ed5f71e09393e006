//! The cache, strict budgets, rate limits and tool calls.

use super::*;
use stead_router::{
    BudgetDirectory, BudgetLimit, LedgerError, SharedLedger, SharedReservation, NO_RESET,
};

#[tokio::test]
async fn identical_calls_are_answered_once_sequentially_and_concurrently() {
    let up = Upstream::start(
        vec![],
        Reply::slow_text("Cached words.", Duration::from_millis(300)),
    )
    .await;
    let s = router(
        &[("a", &up)],
        json!([{ "name": "r", "targets": [{ "provider": "a", "model": "m" }] }]),
        json!({ "cache": { "enabled": true }, "prices": { "m": { "input": 1.0, "output": 2.0 } } }),
    );
    let first = s
        .router
        .call(ask("r", "same"), CallOptions::default(), None)
        .await
        .unwrap();
    let second = s
        .router
        .call(ask("r", "same"), CallOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(
        (first.cache, second.cache),
        (CacheStatus::Miss, CacheStatus::Hit)
    );
    assert_eq!(second.text, "Cached words.");
    assert_eq!(up.requests().len(), 1);
    assert!(first.cost > 0.0);
    assert_eq!(second.cost, 0.0);
    // Scoped per API key (a hit told a key that another had sent the same prompt):
    // another key misses and pays, then hits its own entry.
    let as_key = |key: &str| CallOptions {
        api_key: Some(key.into()),
        ..Default::default()
    };
    let other = s
        .router
        .call(ask("r", "same"), as_key("other"), None)
        .await
        .unwrap();
    assert_eq!(other.cache, CacheStatus::Miss);
    assert_eq!(up.requests().len(), 2);
    let again = s
        .router
        .call(ask("r", "same"), as_key("other"), None)
        .await
        .unwrap();
    assert_eq!(again.cache, CacheStatus::Hit);
    assert_eq!(up.requests().len(), 2);
    // The bypass header's mode goes upstream.
    let bypass = CallOptions {
        cache: CacheMode::Bypass,
        ..Default::default()
    };
    let third = s.router.call(ask("r", "same"), bypass, None).await.unwrap();
    assert_eq!(third.cache, CacheStatus::Bypass);
    assert_eq!(up.requests().len(), 3);

    // Twenty concurrent identical calls (not cached yet): one upstream call.
    let calls = (0..20).map(|_| {
        let router = s.router.clone();
        tokio::spawn(async move {
            router
                .call(ask("r", "concurrent"), CallOptions::default(), None)
                .await
                .unwrap()
        })
    });
    let answers = futures_util::future::join_all(calls).await;
    assert!(answers
        .iter()
        .all(|a| a.as_ref().unwrap().text == "Cached words."));
    assert_eq!(up.requests().len(), 4);
    let misses = answers
        .iter()
        .filter(|a| a.as_ref().unwrap().cache == CacheStatus::Miss)
        .count();
    assert_eq!(misses, 1);

    let records = s.sink.records(25).await;
    assert_eq!(records.len(), 25);
    let hits: Vec<&RequestLogEntry> = records.iter().filter(|r| r.cache_hit).collect();
    assert_eq!(hits.len(), 21, "2 sequential + 19 concurrent hits");
    assert!(hits.iter().all(|r| r.cost == 0.0 && r.tokens_out == 0));
}

#[tokio::test]
async fn fifty_concurrent_calls_against_a_budget_for_ten_serve_at_most_ten() {
    let up = Upstream::start(
        vec![],
        Reply::Text {
            text: "ten tokens".into(),
            delay: Duration::from_millis(300),
            chunk_delay: Duration::ZERO,
            completion_tokens: 10,
        },
    )
    .await;
    // Output at $1000 per million tokens: a call of at most 10 tokens may cost $0.01; the
    // budget of $0.10 fits ten.
    let s = router(
        &[("a", &up)],
        json!([{ "name": "r", "targets": [{ "provider": "a", "model": "m", "max_tokens": 10 }] }]),
        json!({
            "limits": { "budget_usd": 0.1, "budget_window_secs": 3600 },
            "prices": { "m": { "input": 0.0, "output": 1000.0 } },
        }),
    );
    let calls = (0..50).map(|i| {
        let router = s.router.clone();
        tokio::spawn(async move {
            let options = CallOptions {
                api_key: Some("key-1".into()),
                ..Default::default()
            };
            router
                .call(ask("r", &format!("call {i}")), options, None)
                .await
        })
    });
    let results = futures_util::future::join_all(calls).await;
    let served = results
        .iter()
        .filter(|r| r.as_ref().unwrap().is_ok())
        .count();
    let refused: Vec<_> = results
        .iter()
        .filter_map(|r| r.as_ref().unwrap().as_ref().err())
        .collect();
    assert_eq!(served, 10);
    assert_eq!(up.requests().len(), 10);
    assert!(refused
        .iter()
        .all(|e| e.code == "budget_exceeded" && e.retry_after.is_some()));
    // Every served call sent max_tokens 10, so none could cost more than reserved.
    assert!(up.requests().iter().all(|r| r["max_tokens"] == 10));
    let records = s.sink.records(50).await;
    let spent: f64 = records.iter().map(|r| r.cost).sum();
    assert!(spent <= 0.1 + 1e-9, "{spent}");
    assert_eq!(
        records
            .iter()
            .filter(|r| r.status == LogStatus::BudgetExceeded)
            .count(),
        40
    );
}

#[tokio::test]
async fn requests_per_minute_per_key_are_limited_with_a_wait() {
    let up = Upstream::start(vec![], Reply::text("ok")).await;
    let s = router(
        &[("a", &up)],
        json!([{ "name": "r", "targets": [{ "provider": "a", "model": "m" }] }]),
        json!({ "limits": { "requests_per_min": 2 } }),
    );
    let as_key = |key: &str| CallOptions {
        api_key: Some(key.into()),
        ..Default::default()
    };
    for _ in 0..2 {
        s.router
            .call(ask("r", "x"), as_key("k1"), None)
            .await
            .unwrap();
    }
    let error = s
        .router
        .call(ask("r", "x"), as_key("k1"), None)
        .await
        .unwrap_err();
    assert_eq!(error.code, "rate_limited");
    assert!(error.retry_after.unwrap() > Duration::from_secs(10));
    // Another key has its own allowance.
    s.router
        .call(ask("r", "x"), as_key("k2"), None)
        .await
        .unwrap();
    assert_eq!(up.requests().len(), 3);
}

#[tokio::test]
async fn tool_calls_come_back_streamed_or_not_and_unknown_routes_are_refused() {
    let up = Upstream::start(
        vec![],
        Reply::Tool {
            name: "lookup".into(),
            arguments: json!({ "q": "x" }),
        },
    )
    .await;
    let s = router(
        &[("a", &up)],
        json!([{ "name": "r", "targets": [{ "provider": "a", "model": "m" }] }]),
        json!({}),
    );
    let whole = s
        .router
        .call(ask("r", "x"), CallOptions::default(), None)
        .await
        .unwrap();
    let (_, streamed) = stream(&s.router, ask("r", "y"), CallOptions::default()).await;
    for answer in [whole, streamed.unwrap()] {
        assert_eq!(answer.tool_calls.len(), 1);
        assert_eq!(answer.tool_calls[0].name, "lookup");
        let arguments: Value = serde_json::from_str(&answer.tool_calls[0].arguments).unwrap();
        assert_eq!(arguments, json!({ "q": "x" }));
    }
    let error = s
        .router
        .call(ask("nope", "x"), CallOptions::default(), None)
        .await
        .unwrap_err();
    assert_eq!(error.code, "unknown_route");
}

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
        };
        let project = limit("budget:project:p", "project `p`", 0.08);
        Ok(match api_key {
            "k1" => vec![limit("budget:key:k1", "key `k1`", 0.05), project],
            "k2" => vec![limit("budget:key:k2", "key `k2`", 1.0), project],
            _ => Vec::new(),
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
    let up = Upstream::start(
        vec![],
        Reply::Text {
            text: "ten tokens".into(),
            delay: Duration::from_millis(200),
            chunk_delay: Duration::ZERO,
            completion_tokens: 10,
        },
    )
    .await;
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
    let up = Upstream::start(
        vec![],
        Reply::Text {
            text: "ten tokens".into(),
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            completion_tokens: 10,
        },
    )
    .await;
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

//! The cache, the installation's strict budgets, rate limits and tool calls.

use super::*;

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

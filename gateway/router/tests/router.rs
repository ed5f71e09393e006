//! The model router against upstream doubles on loopback scripted to fail (retry, TTFT
//! fallback, `Retry-After`, a stream cut mid-answer, cooldown), its cache (sequential and
//! concurrent identical calls), its limits and strict budgets. Each story is also read back
//! from the request-log records the router wrote (into an in-memory sink double).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{json, Value};
use stead_router::chat::ChatMessage;
use stead_router::config::{GatewayConfig, RouteConfig};
use stead_router::log::{LogRecord, RequestLogSink};
use stead_router::openai::OpenAiProvider;
use stead_router::{
    CacheMode, CacheStatus, CallOptions, Provider, Providers, Router, RouterRequest,
};
use stead_testkit::upstream::{Reply, Upstream};

/// Test double of the request log's sink: keeps the records in memory.
#[derive(Default)]
struct MemorySink {
    records: Mutex<Vec<LogRecord>>,
}

#[async_trait]
impl RequestLogSink for MemorySink {
    async fn write(&self, records: Vec<LogRecord>) -> Result<(), stead_router::log::SinkError> {
        self.records.lock().unwrap().extend(records);
        Ok(())
    }
}

impl MemorySink {
    /// Waits for the batch writer, then returns the records.
    async fn records(&self, at_least: usize) -> Vec<LogRecord> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let records = self.records.lock().unwrap().clone();
            if records.len() >= at_least || Instant::now() > deadline {
                return records;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

struct Setup {
    router: Arc<Router>,
    sink: Arc<MemorySink>,
}

/// A router over the given upstreams (providers `a`, `b`, …) with `routes` and `gateway` as
/// JSON in the configuration's shape.
fn router(upstreams: &[(&str, &Upstream)], routes: Value, gateway: Value) -> Setup {
    let client = reqwest::Client::new();
    let mut providers = Providers::new();
    for (name, upstream) in upstreams {
        providers.insert(
            name.to_string(),
            Some(Arc::new(OpenAiProvider::new(
                *name,
                &upstream.base_url,
                Some("test-key".into()),
                client.clone(),
            )) as Arc<dyn Provider>),
        );
    }
    let routes: Vec<RouteConfig> = serde_json::from_value(routes).unwrap();
    let gateway: GatewayConfig = serde_json::from_value(gateway).unwrap();
    let sink = Arc::new(MemorySink::default());
    let router = Router::new(
        &routes,
        gateway,
        &providers,
        Some(sink.clone() as Arc<dyn RequestLogSink>),
    )
    .unwrap();
    Setup {
        router: Arc::new(router),
        sink,
    }
}

fn ask(route: &str, text: &str) -> RouterRequest {
    RouterRequest {
        route: route.into(),
        messages: vec![ChatMessage::user(text)],
        ..Default::default()
    }
}

/// A streamed call: the text the caller received, and the result.
async fn stream(
    router: &Router,
    request: RouterRequest,
    options: CallOptions,
) -> (
    String,
    Result<stead_router::RouterResponse, stead_router::RouterError>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let result = router.call(request, options, Some(tx)).await;
    let mut text = String::new();
    while let Ok(piece) = rx.try_recv() {
        text.push_str(&piece);
    }
    (text, result)
}

fn fast_retry(attempts: u32) -> Value {
    json!({ "attempts": attempts, "base_ms": 10, "max_ms": 20, "jitter": false })
}

#[tokio::test]
async fn a_500_then_a_200_is_retried_and_both_attempts_are_logged() {
    let up = Upstream::start(vec![Reply::status(500)], Reply::text("Recovered answer.")).await;
    let s = router(
        &[("a", &up)],
        json!([{ "name": "r", "targets": [{ "provider": "a", "model": "m", "retry": fast_retry(3) }] }]),
        json!({}),
    );
    let answer = s
        .router
        .call(ask("r", "hi"), CallOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(answer.text, "Recovered answer.");
    assert_eq!(up.requests().len(), 2);
    let records = s.sink.records(1).await;
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(record.id, answer.id);
    assert_eq!(record.status, "ok");
    assert_eq!(record.provider.as_deref(), Some("a"));
    let story: Vec<(String, Option<u16>)> = record
        .attempts
        .iter()
        .map(|a| (a.outcome.clone(), a.status))
        .collect();
    assert_eq!(
        story,
        vec![("error".into(), Some(500)), ("ok".into(), None)]
    );
    assert_eq!((record.tokens_in, record.tokens_out), (5, 2));
    assert!(!record.stream && !record.cache_hit);
}

#[tokio::test]
async fn a_target_that_hangs_past_its_ttft_timeout_falls_back_to_the_next() {
    let slow = Upstream::start(vec![], Reply::Hang).await;
    let good = Upstream::start(vec![], Reply::text("From the fallback.")).await;
    let s = router(
        &[("slow", &slow), ("good", &good)],
        json!([{ "name": "r", "targets": [
            { "provider": "slow", "model": "m1", "ttft_timeout_secs": 0.3, "retry": fast_retry(1) },
            { "provider": "good", "model": "m2" },
        ] }]),
        json!({}),
    );
    let started = Instant::now();
    let (text, result) = stream(&s.router, ask("r", "hi"), CallOptions::default()).await;
    let answer = result.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(text, "From the fallback.");
    assert_eq!(
        (answer.provider.as_str(), answer.model.as_str()),
        ("good", "m2")
    );
    let record = &s.sink.records(1).await[0];
    let kinds: Vec<(String, Option<String>)> = record
        .attempts
        .iter()
        .map(|a| (a.provider.clone(), a.error_kind.clone()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("slow".into(), Some("ttft_timeout".into())),
            ("good".into(), None)
        ]
    );
    assert!(record.stream);
    assert!(record.ttft_ms.is_some());
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_after_that_wait() {
    let up = Upstream::start(
        vec![Reply::Status {
            status: 429,
            retry_after: Some(1),
        }],
        Reply::text("Patience pays."),
    )
    .await;
    let s = router(
        &[("a", &up)],
        json!([{ "name": "r", "targets": [{ "provider": "a", "model": "m", "retry": fast_retry(2) }] }]),
        json!({}),
    );
    let started = Instant::now();
    let answer = s
        .router
        .call(ask("r", "hi"), CallOptions::default(), None)
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(answer.text, "Patience pays.");
    let record = &s.sink.records(1).await[0];
    assert_eq!(record.attempts[0].status, Some(429));
    assert_eq!(record.attempts[0].retry_after_ms, Some(1000.0));
    assert_eq!(record.attempts[1].outcome, "ok");

    // A Retry-After longer than the target accepts moves on at once (here: no other target).
    up.push([Reply::Status {
        status: 429,
        retry_after: Some(120),
    }]);
    let started = Instant::now();
    let error = s
        .router
        .call(ask("r", "again"), CallOptions::default(), None)
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(error.code, "upstream_failed");
    assert_eq!(error.attempts.len(), 1);
}

#[tokio::test]
async fn a_stream_cut_mid_answer_continues_on_the_next_target_as_one_text() {
    let cut = Upstream::start(
        vec![],
        Reply::Cut {
            text: "The quick brown ".into(),
        },
    )
    .await;
    let next = Upstream::start(vec![], Reply::text("fox jumps.")).await;
    let s = router(
        &[("cut", &cut), ("next", &next)],
        json!([{ "name": "r", "targets": [
            { "provider": "cut", "model": "m1", "retry": fast_retry(1) },
            { "provider": "next", "model": "m2" },
        ] }]),
        json!({}),
    );
    let (text, result) = stream(
        &s.router,
        ask("r", "Say the sentence."),
        CallOptions::default(),
    )
    .await;
    let answer = result.unwrap();
    assert_eq!(text, "The quick brown fox jumps.");
    assert_eq!(answer.text, "The quick brown fox jumps.");
    // The next target was asked to continue the partial answer.
    let continued = &next.requests()[0];
    let messages = continued["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap(),
        &json!({ "role": "assistant", "content": "The quick brown " })
    );
    let record = &s.sink.records(1).await[0];
    let story: Vec<(String, Option<String>, usize)> = record
        .attempts
        .iter()
        .map(|a| (a.provider.clone(), a.error_kind.clone(), a.streamed_chars))
        .collect();
    assert_eq!(
        story,
        vec![
            ("cut".into(), Some("stream".into()), 16),
            ("next".into(), None, 10)
        ]
    );

    // A target that starts the answer over instead of continuing it: the repetition is
    // removed, and the caller still sees one text.
    next.push([Reply::text("The quick brown fox jumps.")]);
    let (text, result) = stream(&s.router, ask("r", "Once more."), CallOptions::default()).await;
    assert_eq!(text, "The quick brown fox jumps.");
    assert_eq!(result.unwrap().text, "The quick brown fox jumps.");
}

#[tokio::test]
async fn a_target_that_keeps_failing_cools_down_and_is_skipped() {
    let broken = Upstream::start(vec![], Reply::status(503)).await;
    let good = Upstream::start(vec![], Reply::text("Fine.")).await;
    let s = router(
        &[("broken", &broken), ("good", &good)],
        json!([{ "name": "r", "targets": [
            { "provider": "broken", "model": "m", "retry": fast_retry(1) },
            { "provider": "good", "model": "m" },
        ] }]),
        json!({ "cooldown_failures": 2, "cooldown_secs": 60 }),
    );
    for i in 0..4 {
        let answer = s
            .router
            .call(ask("r", &format!("call {i}")), CallOptions::default(), None)
            .await
            .unwrap();
        assert_eq!(answer.provider, "good");
    }
    // Two failures opened the breaker: the later calls never reached the broken target.
    assert_eq!(broken.requests().len(), 2);
    let records = s.sink.records(4).await;
    let outcomes: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            r.attempts
                .iter()
                .map(|a| format!("{}:{}", a.provider, a.outcome))
                .collect()
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            vec!["broken:error", "good:ok"],
            vec!["broken:error", "good:ok"],
            vec!["broken:skipped", "good:ok"],
            vec!["broken:skipped", "good:ok"],
        ]
    );
    assert_eq!(
        records[2].attempts[0].error_kind.as_deref(),
        Some("cooldown")
    );
}

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
    // The bypass header's mode goes upstream.
    let bypass = CallOptions {
        cache: CacheMode::Bypass,
        ..Default::default()
    };
    let third = s.router.call(ask("r", "same"), bypass, None).await.unwrap();
    assert_eq!(third.cache, CacheStatus::Bypass);
    assert_eq!(up.requests().len(), 2);

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
    assert_eq!(up.requests().len(), 3);
    let misses = answers
        .iter()
        .filter(|a| a.as_ref().unwrap().cache == CacheStatus::Miss)
        .count();
    assert_eq!(misses, 1);

    let records = s.sink.records(23).await;
    assert_eq!(records.len(), 23);
    let hits: Vec<&LogRecord> = records.iter().filter(|r| r.cache_hit).collect();
    assert_eq!(hits.len(), 20, "1 sequential + 19 concurrent hits");
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
            .filter(|r| r.status == "budget_exceeded")
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

/// Callers that go away mid-call (a client disconnecting, a cancelled turn) hand their budget
/// reservation back, are charged what was streamed, and leave a log record of their own.
#[tokio::test]
async fn abandoned_calls_release_their_reservation_and_are_logged() {
    let words: String = (0..40).map(|i| format!("w{i} ")).collect();
    let up = Upstream::start(
        vec![],
        Reply::Text {
            text: words.clone(),
            delay: Duration::from_millis(200),
            chunk_delay: Duration::from_millis(50),
            completion_tokens: 40,
        },
    )
    .await;
    // A call may cost up to 10 tokens at $1000 per million: $0.01; the budget fits ten.
    let s = router(
        &[("a", &up)],
        json!([{ "name": "r", "targets": [{ "provider": "a", "model": "m", "max_tokens": 10 }] }]),
        json!({
            "limits": { "budget_usd": 0.1, "budget_window_secs": 3600, "tokens_per_min": 1000000 },
            "prices": { "m": { "input": 0.0, "output": 1000.0 } },
        }),
    );
    let options = || CallOptions {
        api_key: Some("key-1".into()),
        ..Default::default()
    };
    // Ten streamed calls, each dropped after its first piece of text: together they reserved
    // the whole budget.
    for i in 0..10 {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let call = s
            .router
            .call(ask("r", &format!("call {i}")), options(), Some(tx));
        tokio::pin!(call);
        tokio::select! {
            _ = &mut call => panic!("the paced answer finished before its first piece"),
            first = rx.recv() => assert!(first.is_some()),
        }
    }
    // One more, not streamed, abandoned while it waits.
    let quiet = tokio::time::timeout(
        Duration::from_millis(100),
        s.router.call(ask("r", "quiet"), options(), None),
    )
    .await;
    assert!(quiet.is_err(), "the call should still have been running");

    // The reservations are back: the budget has room for a whole call again.
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let served = tokio::time::timeout(
        Duration::from_secs(10),
        s.router.call(ask("r", "after"), options(), Some(tx)),
    )
    .await
    .expect("the call ends");
    assert!(served.is_ok(), "refused after abandoned calls: {served:?}");

    let records = s.sink.records(12).await;
    let abandoned: Vec<&LogRecord> = records.iter().filter(|r| r.status == "abandoned").collect();
    assert_eq!(abandoned.len(), 11, "{records:?}");
    let streamed: Vec<&&LogRecord> = abandoned.iter().filter(|r| r.stream).collect();
    assert_eq!(streamed.len(), 10);
    // Charged for what was streamed: at least a token each, never more than reserved.
    assert!(streamed
        .iter()
        .all(|r| r.tokens_out >= 1 && r.cost > 0.0 && r.cost <= 0.01));
    assert!(abandoned
        .iter()
        .all(|r| r.api_key.as_deref() == Some("key-1") && r.error.is_some()));
    let spent: f64 = records.iter().map(|r| r.cost).sum();
    assert!(spent <= 0.1 + 1e-9, "{spent}");
}

/// A request that times out while its target is still streaming was long, not the target
/// unhealthy: such timeouts do not cool the target down for every other caller. A target that
/// sends nothing before its deadline still counts.
#[tokio::test]
async fn long_requests_timing_out_mid_stream_do_not_cool_the_target_down() {
    let words: String = (0..100).map(|i| format!("w{i} ")).collect();
    let slow = Upstream::start(vec![], Reply::paced(&words, Duration::from_millis(20))).await;
    let silent = Upstream::start(vec![], Reply::Hang).await;
    let good = Upstream::start(vec![], Reply::text("Fine.")).await;
    let route = |first: &str| {
        json!([{ "name": "r", "targets": [
            { "provider": first, "model": "m", "timeout_secs": 0.3, "retry": fast_retry(1) },
            { "provider": "good", "model": "m" },
        ] }])
    };
    let cooldown = json!({ "cooldown_failures": 2, "cooldown_secs": 60 });
    let s = router(
        &[("slow", &slow), ("good", &good)],
        route("slow"),
        cooldown.clone(),
    );
    for i in 0..4 {
        let (_, result) = stream(
            &s.router,
            ask("r", &format!("long {i}")),
            CallOptions::default(),
        )
        .await;
        let answer = result.unwrap();
        assert_eq!(answer.attempts[0].outcome, "error", "call {i}: {answer:?}");
        assert!(answer.attempts[0].streamed_chars > 0);
    }
    // Every call reached the slow target: four timeouts mid-stream, no cooldown.
    assert_eq!(slow.requests().len(), 4);

    // A target that answers nothing in time is unhealthy: it cools down after two.
    let s = router(
        &[("silent", &silent), ("good", &good)],
        route("silent"),
        cooldown,
    );
    for i in 0..4 {
        let (_, result) = stream(
            &s.router,
            ask("r", &format!("hang {i}")),
            CallOptions::default(),
        )
        .await;
        assert_eq!(result.unwrap().provider, "good");
    }
    assert_eq!(
        silent.requests().len(),
        2,
        "later calls skipped it: cooling down"
    );
}

/// `[gateway.log] bodies`: `metadata` (the default) keeps the caller's metadata and no
/// content; `full` adds the request and the response; `none` keeps neither.
#[tokio::test]
async fn the_log_keeps_bodies_only_when_asked() {
    let up = Upstream::start(vec![], Reply::text("A private answer.")).await;
    let options = || {
        let mut metadata = serde_json::Map::new();
        metadata.insert("customer".into(), json!("acme"));
        CallOptions {
            metadata,
            ..Default::default()
        }
    };
    let mut rows = Vec::new();
    for bodies in ["metadata", "full", "none"] {
        let s = router(
            &[("a", &up)],
            json!([{ "name": "r", "targets": [{ "provider": "a", "model": "m" }] }]),
            json!({ "log": { "bodies": bodies, "flush_ms": 10 } }),
        );
        s.router
            .call(ask("r", "a private question"), options(), None)
            .await
            .unwrap();
        rows.push(s.sink.records(1).await.remove(0));
    }
    assert_eq!(rows[0].bodies, Value::Null);
    assert_eq!(rows[0].metadata.get("customer"), Some(&json!("acme")));
    assert_eq!(
        rows[1].bodies["request"]["messages"][0]["content"],
        "a private question"
    );
    assert_eq!(rows[1].bodies["response"]["text"], "A private answer.");
    assert_eq!(rows[2].bodies, Value::Null);
    assert!(rows[2].metadata.is_empty());
    for row in &rows {
        let text = serde_json::to_string(&row.bodies).unwrap();
        assert!(!text.contains("test-key"), "no credential in a row: {text}");
    }
}

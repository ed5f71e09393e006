//! Retries, TTFT fallback, `Retry-After`, mid-stream failover and cooldowns.

use super::*;

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
    assert_eq!(record.status, LogStatus::Ok);
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

/// An upstream that answers without end is cut off at the answer limit,
/// streamed or not, and the route falls back (the bytes are never buffered whole).
#[tokio::test]
async fn an_answer_over_the_size_limit_fails_its_attempt_and_falls_back() {
    use stead_router::answer::MAX_ANSWER_BYTES;
    let huge = "x".repeat(MAX_ANSWER_BYTES + 1);
    let flood = Upstream::start(vec![], Reply::text(&huge)).await;
    let fine = Upstream::start(vec![], Reply::text("Small answer.")).await;
    let s = router(
        &[("a", &flood), ("b", &fine)],
        json!([{ "name": "r", "targets": [
            { "provider": "a", "model": "m", "retry": fast_retry(1) },
            { "provider": "b", "model": "m" }
        ] }]),
        json!({}),
    );
    let whole = s
        .router
        .call(ask("r", "hi"), CallOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(whole.text, "Small answer.");
    let (streamed, result) = stream(&s.router, ask("r", "hi"), CallOptions::default()).await;
    assert_eq!(result.unwrap().text, "Small answer.");
    assert!(streamed.ends_with("Small answer."), "{}", streamed.len());
    let records = s.sink.records(2).await;
    assert_eq!(records.len(), 2);
    for record in &records {
        let first = &record.attempts[0];
        assert_eq!(first.error_kind.as_deref(), Some("stream"));
        let error = first.error.as_deref().unwrap_or("");
        assert!(error.contains("over 16 MiB"), "{error}");
    }
}

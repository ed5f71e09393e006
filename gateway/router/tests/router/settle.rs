//! Abandoned calls settle; the log keeps bodies only when asked.

use super::*;

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
    let abandoned: Vec<&RequestLogEntry> = records
        .iter()
        .filter(|r| r.status == LogStatus::Abandoned)
        .collect();
    assert_eq!(abandoned.len(), 11, "{records:?}");
    let streamed: Vec<&&RequestLogEntry> = abandoned.iter().filter(|r| r.stream).collect();
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

//! Appends and reads: concurrent and racing writers, read-your-writes, pages, payloads by
//! value, size limits, conflicts and atomic multi-event appends.

use super::*;

stead_testkit::both_backends!(
    concurrent_appenders_on_one_session,
    racing_writers_with_the_same_view,
    two_hundred_sessions_append_concurrently,
    other_writes_interleave_with_busy_appenders,
    read_your_writes,
    pagination_is_stable_under_inserts,
    json_payloads_round_trip_by_value,
    oversized_event_is_refused_and_nothing_written,
    stale_writer_gets_conflict_and_writes_nothing,
    multi_event_append_is_atomic_and_gapless,
);

async fn concurrent_appenders_on_one_session(backend: Backend) {
    let t = db::open(backend).await;
    let id = new_session(&t.store).await;
    const WRITERS: usize = 8;
    const EACH: usize = 25;
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let store = t.store.clone();
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            let mut conflicts = 0;
            let mut last = 0;
            while won.len() < EACH {
                let payload = json!({ "writer": writer, "n": won.len() });
                match store
                    .append(id, last, vec![NewEvent::new("step", payload)])
                    .await
                {
                    Ok(seqs) => {
                        assert_eq!(seqs, vec![last + 1]);
                        won.push(seqs[0]);
                        last = seqs[0];
                    }
                    Err(Error::Conflict {
                        actual, expected, ..
                    }) => {
                        assert_eq!(expected, last);
                        assert!(actual > last, "a conflict reports a newer seq");
                        conflicts += 1;
                        last = actual;
                    }
                    Err(other) => panic!("unexpected error: {other}"),
                }
            }
            (writer, won, conflicts)
        }));
    }
    let mut all_won = Vec::new();
    let mut total_conflicts = 0;
    for task in tasks {
        let (_, won, conflicts) = task.await.unwrap();
        all_won.extend(won);
        total_conflicts += conflicts;
    }
    // Exactly one writer won each seq: no seq was handed out twice, and none is missing.
    let unique: BTreeSet<i64> = all_won.iter().copied().collect();
    assert_eq!(unique.len(), all_won.len(), "a seq was acknowledged twice");
    assert_eq!(
        unique,
        (1..=(WRITERS * EACH) as i64).collect::<BTreeSet<_>>()
    );
    assert!(
        total_conflicts > 0,
        "writers with stale views must be fenced"
    );

    let events = assert_gapless(&t.store, id).await;
    for writer in 0..WRITERS {
        let ns: Vec<i64> = events
            .iter()
            .filter(|e| e.payload["writer"] == json!(writer))
            .map(|e| e.payload["n"].as_i64().unwrap())
            .collect();
        assert_eq!(
            ns,
            (0..EACH as i64).collect::<Vec<_>>(),
            "writer {writer}'s order"
        );
    }
    t.finish().await;
}

async fn racing_writers_with_the_same_view(backend: Backend) {
    let t = db::open(backend).await;
    for round in 0..20 {
        let id = new_session(&t.store).await;
        let (a, b) = tokio::join!(
            t.store.append(id, 0, vec![event(1)]),
            t.store.append(id, 0, vec![event(2), event(3)]),
        );
        let (winner, loser) = match (&a, &b) {
            (Ok(_), Err(_)) => (a.unwrap(), b.unwrap_err()),
            (Err(_), Ok(_)) => (b.unwrap(), a.unwrap_err()),
            other => panic!("round {round}: exactly one must win, got {other:?}"),
        };
        match loser {
            Error::Conflict {
                expected, actual, ..
            } => {
                assert_eq!(expected, 0);
                assert_eq!(actual, winner.len() as i64);
            }
            other => panic!("loser must get a conflict, got {other}"),
        }
        let events = assert_gapless(&t.store, id).await;
        assert_eq!(events.len(), winner.len());
    }
    t.finish().await;
}

async fn two_hundred_sessions_append_concurrently(backend: Backend) {
    let t = db::open(backend).await;
    const SESSIONS: usize = 200;
    const EACH: i64 = 20;
    let mut ids = Vec::new();
    for _ in 0..SESSIONS {
        ids.push(new_session(&t.store).await);
    }
    let before = t.store.journal_stats();
    let mut tasks = Vec::new();
    for id in ids.iter().copied() {
        let store = t.store.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..EACH {
                let seqs = store
                    .append(id, n, vec![event(n + 1)])
                    .await
                    .expect("append");
                assert_eq!(seqs, vec![n + 1]);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for id in &ids {
        let events = assert_gapless(&t.store, *id).await;
        assert_eq!(events.len() as i64, EACH);
        for e in &events {
            assert_eq!(e.payload["n"], json!(e.seq), "payload belongs to its seq");
        }
    }
    let stats = t.store.journal_stats();
    let appends = stats.appends - before.appends;
    let commits = stats.commits - before.commits;
    assert_eq!(appends, SESSIONS as u64 * EACH as u64);
    assert!(
        commits < appends,
        "concurrent appends must share commits (group commit): {commits} commits for {appends} appends"
    );
    t.finish().await;
}

/// While 40 sessions append as fast as they can, the store's other writes — sessions created,
/// key-value entries set, leases taken and released, statuses written — go on beside them (on
/// SQLite the journal writes through a connection of its own that takes turns with the store's
/// writer), and every one of them lands, as does every acknowledged append.
async fn other_writes_interleave_with_busy_appenders(backend: Backend) {
    let t = db::open(backend).await;
    const SESSIONS: usize = 40;
    const EACH: i64 = 25;
    let mut ids = Vec::new();
    for _ in 0..SESSIONS {
        ids.push(new_session(&t.store).await);
    }
    let mut appenders = Vec::new();
    for id in ids.iter().copied() {
        let store = t.store.clone();
        appenders.push(tokio::spawn(async move {
            for n in 0..EACH {
                assert_eq!(
                    store.append(id, n, vec![event(n + 1)]).await.unwrap(),
                    vec![n + 1]
                );
            }
        }));
    }
    let store = t.store.clone();
    let others = tokio::spawn(async move {
        let mut created = Vec::new();
        for n in 0..30 {
            let id = new_session(&store).await;
            store.kv_set(id, "n", json!(n)).await.unwrap();
            let lease = store
                .acquire_lease(id, "node-a", std::time::Duration::from_secs(30))
                .await
                .unwrap();
            store
                .release_lease(id, "node-a", lease.epoch)
                .await
                .unwrap();
            store
                .update_status(id, SessionStatus::AwaitingApproval)
                .await
                .unwrap();
            created.push(id);
        }
        created
    });
    for task in appenders {
        task.await.unwrap();
    }
    let created = others.await.unwrap();
    for id in &ids {
        assert_eq!(assert_gapless(&t.store, *id).await.len() as i64, EACH);
    }
    for (n, id) in created.iter().enumerate() {
        let entry = t.store.kv_get(*id, "n").await.unwrap().expect("kv entry");
        assert_eq!(entry.value, json!(n));
        let session = t.store.get_session(*id).await.unwrap();
        assert_eq!(session.status, SessionStatus::AwaitingApproval);
        assert_eq!(t.store.lease_holder(*id).await.unwrap(), None);
    }
    t.finish().await;
}

async fn read_your_writes(backend: Backend) {
    let t = db::open(backend).await;
    let id = new_session(&t.store).await;
    for n in 0..50 {
        let seqs = t.store.append(id, n, vec![event(n + 1)]).await.unwrap();
        let read = t.store.read(id, n, 10).await.unwrap();
        assert_eq!(read.len(), 1, "the append just acknowledged is visible");
        assert_eq!(read[0].seq, seqs[0]);
        assert_eq!(
            read[0].payload,
            json!({ "text": format!("message {}", n + 1), "n": n + 1 })
        );
        assert_eq!(t.store.get_session(id).await.unwrap().last_seq, n + 1);
    }
    // `read` pages by after_seq and limit.
    let page = t.store.read(id, 10, 5).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![11, 12, 13, 14, 15]
    );
    assert!(t.store.read(id, 50, 10).await.unwrap().is_empty());
    t.finish().await;
}

async fn pagination_is_stable_under_inserts(backend: Backend) {
    let t = db::open(backend).await;
    let mut created = Vec::new();
    for _ in 0..25 {
        created.push(new_session(&t.store).await);
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = t
            .store
            .list_sessions(&SessionQuery {
                scope: stead_persistence::Scope::Installation,
                limit: 10,
                cursor: cursor.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        seen.extend(page.sessions.iter().map(|s| s.id));
        pages += 1;
        if pages == 1 {
            // Newer sessions arrive between pages: they must not shift later pages.
            for _ in 0..5 {
                new_session(&t.store).await;
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let newest_first: Vec<Uuid> = created.iter().rev().copied().collect();
    assert_eq!(
        seen, newest_first,
        "every original session once, newest first"
    );
    assert_eq!(pages, 3);
    t.finish().await;
}

async fn json_payloads_round_trip_by_value(backend: Backend) {
    let t = db::open(backend).await;
    let id = new_session(&t.store).await;
    let payloads = vec![
        json!({}),
        json!({ "z": 1, "a": 2, "m": { "nested": [1, 2, { "deep": true }] } }),
        json!({ "text": "line one\nline \"two\"\t\\ — ünïcødé 🦀 中文", "client_id": null }),
        json!({ "big": i64::MAX, "small": i64::MIN, "unsigned": u64::MAX, "zero": 0 }),
        json!({ "float": 1.5, "tiny": 1e-7, "sum": 0.1 + 0.2, "neg": -2.25e10 }),
        json!({ "array": [], "empty": "", "bools": [true, false], "nulls": [null, null] }),
        json!([1, "two", 3.0]),
        json!("a bare string"),
        json!(42),
        json!({ "tool_calls": [{ "id": "call_1", "function": { "name": "delete_records", "arguments": "{\"table\":\"users\"}" } }] }),
    ];
    let events: Vec<NewEvent> = payloads
        .iter()
        .map(|p| NewEvent::new("model_call_finished", p.clone()))
        .collect();
    t.store.append(id, 0, events).await.unwrap();
    let read = t.store.read(id, 0, 100).await.unwrap();
    let back: Vec<Value> = read.into_iter().map(|e| e.payload).collect();
    assert_eq!(back, payloads);

    let metadata = json!({ "user": "ada", "tags": ["a", "b"], "score": 0.5 });
    let s = t
        .store
        .create_session(NewSession {
            project_id: stead_persistence::DEFAULT_PROJECT,
            id: None,
            agent: "test".into(),
            metadata: metadata.clone(),
            parent: None,
        })
        .await
        .unwrap();
    assert_eq!(t.store.get_session(s.id).await.unwrap().metadata, metadata);
    t.finish().await;
}

async fn oversized_event_is_refused_and_nothing_written(backend: Backend) {
    let t = db::open_with(backend, |o| o.max_event_bytes = 1024).await;
    let id = new_session(&t.store).await;
    let small = NewEvent::new("user_message", json!({ "text": "hi" }));
    let huge = NewEvent::new("user_message", json!({ "text": "x".repeat(2000) }));
    match t.store.append(id, 0, vec![small.clone(), huge]).await {
        Err(Error::EventTooLarge { size, limit, kind }) => {
            assert_eq!(limit, 1024);
            assert!(size > 2000);
            assert_eq!(kind, "user_message");
        }
        other => panic!("expected EventTooLarge, got {other:?}"),
    }
    assert!(t.store.read(id, 0, 10).await.unwrap().is_empty());
    assert_eq!(t.store.get_session(id).await.unwrap().last_seq, 0);
    // Exactly at the limit is allowed: `{"text":"…"}` is 11 bytes of framing.
    let at_limit = NewEvent::new("user_message", json!({ "text": "y".repeat(1024 - 11) }));
    assert_eq!(
        t.store.append(id, 0, vec![at_limit, small]).await.unwrap(),
        vec![1, 2]
    );
    t.finish().await;
}

async fn stale_writer_gets_conflict_and_writes_nothing(backend: Backend) {
    let t = db::open(backend).await;
    let id = new_session(&t.store).await;
    t.store
        .append(id, 0, vec![event(1), event(2)])
        .await
        .unwrap();
    for stale in [0, 1, 3, 99] {
        match t.store.append(id, stale, vec![event(9)]).await {
            Err(Error::Conflict {
                session_id,
                expected,
                actual,
            }) => {
                assert_eq!(session_id, id);
                assert_eq!(expected, stale);
                assert_eq!(actual, 2);
            }
            other => panic!("expected a conflict for expected={stale}, got {other:?}"),
        }
    }
    let events = assert_gapless(&t.store, id).await;
    assert_eq!(events.len(), 2);
    t.finish().await;
}

async fn multi_event_append_is_atomic_and_gapless(backend: Backend) {
    let t = db::open(backend).await;
    let id = new_session(&t.store).await;
    assert_eq!(
        t.store.append(id, 0, vec![event(1)]).await.unwrap(),
        vec![1]
    );
    let batch: Vec<NewEvent> = (2..=11).map(event).collect();
    assert_eq!(
        t.store.append(id, 1, batch).await.unwrap(),
        (2..=11).collect::<Vec<i64>>()
    );
    let events = assert_gapless(&t.store, id).await;
    assert_eq!(events.len(), 11);
    assert!(events.iter().all(|e| e.payload["n"] == json!(e.seq)));
    t.finish().await;
}

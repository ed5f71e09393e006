//! The journal contract, run against both backends.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use serde_json::{json, Value};
use stead_persistence::{
    Backend, Error, JournalStore, NewEvent, NewSession, SessionQuery, SessionStatus,
};
use uuid::Uuid;

both_backends!(
    concurrent_appenders_on_one_session,
    racing_writers_with_the_same_view,
    two_hundred_sessions_append_concurrently,
    read_your_writes,
    pagination_is_stable_under_inserts,
    list_filters_by_agent_and_status,
    json_payloads_round_trip_by_value,
    oversized_event_is_refused_and_nothing_written,
    stale_writer_gets_conflict_and_writes_nothing,
    multi_event_append_is_atomic_and_gapless,
    unknown_session_is_a_typed_error,
    session_lifecycle,
    snapshots_keep_the_newest,
    key_value_storage,
    bad_input_is_refused,
    migrations_are_idempotent,
    leases_fence_every_write_of_an_earlier_holder,
    compaction_replaces_an_ended_journal_only,
);

fn event(n: i64) -> NewEvent {
    NewEvent::new(
        "user_message",
        json!({ "text": format!("message {n}"), "n": n }),
    )
}

async fn new_session(store: &Arc<dyn JournalStore>) -> Uuid {
    store
        .create_session(NewSession::for_agent("test"))
        .await
        .expect("create session")
        .id
}

/// Every seq from 1 to the last is present exactly once, in order.
async fn assert_gapless(store: &Arc<dyn JournalStore>, id: Uuid) -> Vec<stead_persistence::Event> {
    let events = store.read(id, 0, 100_000).await.expect("read");
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    let expected: Vec<i64> = (1..=events.len() as i64).collect();
    assert_eq!(seqs, expected, "journal of {id} is not gapless from 1");
    let session = store.get_session(id).await.expect("get session");
    assert_eq!(session.last_seq, events.len() as i64);
    events
}

async fn concurrent_appenders_on_one_session(backend: Backend) {
    let t = common::open(backend).await;
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
    let t = common::open(backend).await;
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
    let t = common::open(backend).await;
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

async fn read_your_writes(backend: Backend) {
    let t = common::open(backend).await;
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
    let t = common::open(backend).await;
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

async fn list_filters_by_agent_and_status(backend: Backend) {
    let t = common::open(backend).await;
    let mut ops = Vec::new();
    for i in 0..6 {
        let agent = if i % 2 == 0 { "ops" } else { "support" };
        let s = t
            .store
            .create_session(NewSession::for_agent(agent))
            .await
            .unwrap();
        if agent == "ops" {
            ops.push(s.id);
        }
    }
    t.store
        .update_status(ops[1], SessionStatus::Running)
        .await
        .unwrap();
    let page = t
        .store
        .list_sessions(&SessionQuery {
            agent: Some("ops".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        page.sessions.iter().map(|s| s.id).collect::<Vec<_>>(),
        ops.iter().rev().copied().collect::<Vec<_>>()
    );
    assert_eq!(page.next_cursor, None);
    let running = t
        .store
        .list_sessions(&SessionQuery {
            agent: Some("ops".into()),
            status: Some(SessionStatus::Running),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(running.sessions.len(), 1);
    assert_eq!(running.sessions[0].id, ops[1]);
    let mut counts = t.store.count_sessions().await.unwrap();
    counts.sort_by_key(|(status, _)| status.as_str());
    assert_eq!(
        counts,
        vec![(SessionStatus::Idle, 5), (SessionStatus::Running, 1)]
    );
    let bad = t
        .store
        .list_sessions(&SessionQuery {
            cursor: Some("not-a-cursor".into()),
            ..Default::default()
        })
        .await;
    assert!(matches!(bad, Err(Error::InvalidInput(_))));
    t.finish().await;
}

async fn json_payloads_round_trip_by_value(backend: Backend) {
    let t = common::open(backend).await;
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
            id: None,
            agent: "test".into(),
            metadata: metadata.clone(),
        })
        .await
        .unwrap();
    assert_eq!(t.store.get_session(s.id).await.unwrap().metadata, metadata);
    t.finish().await;
}

async fn oversized_event_is_refused_and_nothing_written(backend: Backend) {
    let t = common::open_with(backend, |o| o.max_event_bytes = 1024).await;
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
    let t = common::open(backend).await;
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
    let t = common::open(backend).await;
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

async fn unknown_session_is_a_typed_error(backend: Backend) {
    let t = common::open(backend).await;
    let ghost = Uuid::now_v7();
    assert!(matches!(
        t.store.append(ghost, 0, vec![event(1)]).await,
        Err(Error::SessionNotFound(id)) if id == ghost
    ));
    assert!(matches!(
        t.store.read(ghost, 0, 10).await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.get_session(ghost).await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.update_status(ghost, SessionStatus::Running).await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.close_session(ghost).await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.kv_get(ghost, "k").await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.put_snapshot(ghost, 1, json!({})).await,
        Err(Error::SessionNotFound(_))
    ));
    t.finish().await;
}

async fn session_lifecycle(backend: Backend) {
    let t = common::open(backend).await;
    let created = t
        .store
        .create_session(NewSession {
            id: None,
            agent: "ops".into(),
            metadata: json!({ "team": "infra" }),
        })
        .await
        .unwrap();
    assert_eq!(created.status, SessionStatus::Idle);
    assert_eq!(created.last_seq, 0);
    assert_eq!(t.store.get_session(created.id).await.unwrap(), created);

    for status in [
        SessionStatus::Running,
        SessionStatus::AwaitingApproval,
        SessionStatus::Idle,
    ] {
        let s = t.store.update_status(created.id, status).await.unwrap();
        assert_eq!(s.status, status);
    }
    let closed = t.store.close_session(created.id).await.unwrap();
    assert_eq!(closed.status, SessionStatus::Closed);
    let closed_at = closed.closed_at.expect("closed_at set");
    // Closing twice keeps the first closing time.
    let again = t.store.close_session(created.id).await.unwrap();
    assert_eq!(again.closed_at, Some(closed_at));

    // A caller-chosen id (imports, forks) is kept; reusing it is refused.
    let fixed = Uuid::now_v7();
    let s = t
        .store
        .create_session(NewSession {
            id: Some(fixed),
            ..NewSession::for_agent("ops")
        })
        .await
        .unwrap();
    assert_eq!(s.id, fixed);
    assert!(matches!(
        t.store
            .create_session(NewSession {
                id: Some(fixed),
                ..NewSession::for_agent("ops")
            })
            .await,
        Err(Error::InvalidInput(_))
    ));
    t.finish().await;
}

async fn snapshots_keep_the_newest(backend: Backend) {
    let t = common::open(backend).await;
    let id = new_session(&t.store).await;
    assert_eq!(t.store.latest_snapshot(id).await.unwrap(), None);
    t.store
        .put_snapshot(id, 5, json!({ "at": 5 }))
        .await
        .unwrap();
    t.store
        .put_snapshot(id, 3, json!({ "at": 3 }))
        .await
        .unwrap();
    let snap = t.store.latest_snapshot(id).await.unwrap().unwrap();
    assert_eq!((snap.seq, snap.state), (5, json!({ "at": 5 })));
    t.store
        .put_snapshot(id, 10, json!({ "at": 10, "messages": ["a"] }))
        .await
        .unwrap();
    let snap = t.store.latest_snapshot(id).await.unwrap().unwrap();
    assert_eq!(snap.seq, 10);
    assert_eq!(snap.state, json!({ "at": 10, "messages": ["a"] }));
    assert_eq!(snap.session_id, id);
    t.finish().await;
}

async fn key_value_storage(backend: Backend) {
    let t = common::open(backend).await;
    let id = new_session(&t.store).await;
    let other = new_session(&t.store).await;
    assert_eq!(t.store.kv_get(id, "notes/a").await.unwrap(), None);
    t.store.kv_set(id, "notes/a", json!("first")).await.unwrap();
    t.store
        .kv_set(id, "notes/b", json!({ "n": 2 }))
        .await
        .unwrap();
    t.store.kv_set(id, "notes%/c", json!(3)).await.unwrap();
    t.store.kv_set(id, "other", json!(null)).await.unwrap();
    t.store
        .kv_set(other, "notes/a", json!("someone else's"))
        .await
        .unwrap();
    // Overwrite.
    t.store
        .kv_set(id, "notes/a", json!("second"))
        .await
        .unwrap();
    assert_eq!(
        t.store.kv_get(id, "notes/a").await.unwrap().unwrap().value,
        json!("second")
    );

    let keys = |entries: Vec<stead_persistence::KvEntry>| -> Vec<String> {
        entries.into_iter().map(|e| e.key).collect()
    };
    assert_eq!(
        keys(t.store.kv_list(id, "notes/").await.unwrap()),
        vec!["notes/a", "notes/b"]
    );
    // `%` and `_` are literal in prefixes.
    assert_eq!(
        keys(t.store.kv_list(id, "notes%").await.unwrap()),
        vec!["notes%/c"]
    );
    assert_eq!(t.store.kv_list(id, "").await.unwrap().len(), 4);

    assert!(t.store.kv_delete(id, "notes/a").await.unwrap());
    assert!(!t.store.kv_delete(id, "notes/a").await.unwrap());
    assert_eq!(t.store.kv_get(id, "notes/a").await.unwrap(), None);
    // Storage is per session.
    assert_eq!(
        t.store
            .kv_get(other, "notes/a")
            .await
            .unwrap()
            .unwrap()
            .value,
        json!("someone else's")
    );
    t.finish().await;
}

async fn bad_input_is_refused(backend: Backend) {
    let t = common::open(backend).await;
    let id = new_session(&t.store).await;
    assert!(matches!(
        t.store.append(id, 0, vec![]).await,
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        t.store.append(id, -1, vec![event(1)]).await,
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        t.store
            .append(id, 0, vec![NewEvent::new("", json!({}))])
            .await,
        Err(Error::InvalidInput(_))
    ));
    // PostgreSQL's jsonb cannot hold NUL; both backends refuse it the same way.
    assert!(matches!(
        t.store
            .append(
                id,
                0,
                vec![event(1), NewEvent::new("x", json!({ "t": "a\u{0}b" }))]
            )
            .await,
        Err(Error::InvalidInput(_))
    ));
    assert!(t.store.read(id, 0, 10).await.unwrap().is_empty());
    // The store keeps working after refusals.
    assert_eq!(
        t.store.append(id, 0, vec![event(1)]).await.unwrap(),
        vec![1]
    );
    t.finish().await;
}

async fn migrations_are_idempotent(backend: Backend) {
    let t = common::open(backend).await;
    let report = t.store.migrate().await.unwrap();
    assert!(report.applied.is_empty(), "nothing left to apply");
    assert!(report.current.is_some());
    let ids: HashSet<Uuid> = HashSet::from([new_session(&t.store).await]);
    assert_eq!(ids.len(), 1);
    t.finish().await;
}

async fn leases_fence_every_write_of_an_earlier_holder(backend: Backend) {
    use std::time::Duration;
    let t = common::open(backend).await;
    let id = new_session(&t.store).await;
    let long = Duration::from_secs(60);
    let a = t.store.acquire_lease(id, "node-a", long).await.unwrap();
    assert_eq!(a.owner, "node-a");
    // Another node cannot take a live lease.
    match t.store.acquire_lease(id, "node-b", long).await {
        Err(Error::LeaseHeld { owner, .. }) => assert_eq!(owner, "node-a"),
        other => panic!("expected LeaseHeld, got {other:?}"),
    }
    // The holder writes at its epoch; a write at another epoch is fenced and writes nothing.
    assert_eq!(
        t.store
            .append_fenced(id, 0, a.epoch, None, vec![event(1)])
            .await
            .unwrap(),
        vec![1]
    );
    assert!(matches!(
        t.store.append_fenced(id, 1, a.epoch + 7, None, vec![event(2)]).await,
        Err(Error::Fenced { held, current, .. }) if held == a.epoch + 7 && current == a.epoch
    ));
    // Re-acquiring (the same node restarting its actor) moves the epoch on and fences the
    // earlier activation, also when its seq view is current.
    let a2 = t.store.acquire_lease(id, "node-a", long).await.unwrap();
    assert!(a2.epoch > a.epoch);
    assert!(matches!(
        t.store
            .append_fenced(id, 1, a.epoch, None, vec![event(2)])
            .await,
        Err(Error::Fenced { .. })
    ));
    assert!(matches!(
        t.store.renew_lease(id, "node-a", a.epoch, long).await,
        Err(Error::Fenced { .. })
    ));
    t.store
        .renew_lease(id, "node-a", a2.epoch, long)
        .await
        .unwrap();
    // A seq conflict at the right epoch is still a conflict.
    assert!(matches!(
        t.store
            .append_fenced(id, 0, a2.epoch, None, vec![event(2)])
            .await,
        Err(Error::Conflict { actual: 1, .. })
    ));
    // Released, another node takes it at once; an expired lease can be taken too.
    t.store.release_lease(id, "node-a", a2.epoch).await.unwrap();
    let b = t
        .store
        .acquire_lease(id, "node-b", Duration::from_millis(1))
        .await
        .unwrap();
    assert!(b.epoch > a2.epoch);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let c = t.store.acquire_lease(id, "node-c", long).await.unwrap();
    assert!(c.epoch > b.epoch);
    assert!(matches!(
        t.store
            .append_fenced(id, 1, b.epoch, None, vec![event(2)])
            .await,
        Err(Error::Fenced { .. })
    ));
    // Unfenced appends (single-node tools, imports) still work; the journal is gapless.
    assert_eq!(
        t.store
            .append_fenced(id, 1, c.epoch, Some(SessionStatus::Running), vec![event(2)])
            .await
            .unwrap(),
        vec![2]
    );
    assert_eq!(assert_gapless(&t.store, id).await.len(), 2);
    // The status given with an append is written with it; `closed` sets closed_at too.
    assert_eq!(
        t.store.get_session(id).await.unwrap().status,
        SessionStatus::Running
    );
    t.store
        .append_fenced(id, 2, c.epoch, Some(SessionStatus::Closed), vec![event(3)])
        .await
        .unwrap();
    let row = t.store.get_session(id).await.unwrap();
    assert_eq!(row.status, SessionStatus::Closed);
    assert!(row.closed_at.is_some());
    assert!(matches!(
        t.store.acquire_lease(Uuid::now_v7(), "node-a", long).await,
        Err(Error::SessionNotFound(_))
    ));
    t.finish().await;
}

async fn compaction_replaces_an_ended_journal_only(backend: Backend) {
    let t = common::open(backend).await;
    let id = new_session(&t.store).await;
    t.store
        .append(id, 0, (1..=5).map(event).collect())
        .await
        .unwrap();
    let state = json!({ "version": 1, "state": { "last_seq": 5 } });
    let summary = json!({ "events": 5 });
    // Open (idle) and parked sessions are never compacted; nothing changes.
    for status in [SessionStatus::Idle, SessionStatus::AwaitingApproval] {
        t.store.update_status(id, status).await.unwrap();
        let refused = t.store.compact(id, 5, state.clone(), summary.clone()).await;
        assert!(
            matches!(refused, Err(Error::NotCompactable { status: s, .. }) if s == status),
            "{refused:?}"
        );
        assert_eq!(t.store.read(id, 0, 100).await.unwrap().len(), 5);
        assert_eq!(t.store.compaction(id).await.unwrap(), None);
    }
    let far_future = chrono::Utc::now() + chrono::Duration::days(1);
    assert!(t
        .store
        .compaction_candidates(far_future, None, 100)
        .await
        .unwrap()
        .is_empty());
    t.store.close_session(id).await.unwrap();
    let found = t
        .store
        .compaction_candidates(far_future, None, 100)
        .await
        .unwrap();
    assert_eq!(
        found.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![id]
    );
    // Keyset paging steps past a position.
    assert!(t
        .store
        .compaction_candidates(far_future, Some((found[0].1, id)), 100)
        .await
        .unwrap()
        .is_empty());
    let past = chrono::Utc::now() - chrono::Duration::days(1);
    assert!(t
        .store
        .compaction_candidates(past, None, 100)
        .await
        .unwrap()
        .is_empty());
    // A stale `through_seq` is a conflict.
    let stale = t.store.compact(id, 4, state.clone(), summary.clone()).await;
    assert!(
        matches!(stale, Err(Error::Conflict { actual: 5, .. })),
        "{stale:?}"
    );

    let done = t
        .store
        .compact(id, 5, state.clone(), summary.clone())
        .await
        .unwrap();
    assert_eq!(
        (done.through_seq, &done.state, &done.summary),
        (5, &state, &summary)
    );
    assert!(t.store.read(id, 0, 100).await.unwrap().is_empty());
    let stored = t.store.compaction(id).await.unwrap().unwrap();
    assert_eq!(stored, done);
    let snapshot = t.store.latest_snapshot(id).await.unwrap().unwrap();
    assert_eq!((snapshot.seq, snapshot.state), (5, state));
    let session = t.store.get_session(id).await.unwrap();
    assert_eq!(session.last_seq, 5);
    assert!(t
        .store
        .compaction_candidates(far_future, None, 100)
        .await
        .unwrap()
        .is_empty());
    assert!(matches!(
        t.store.compaction(Uuid::now_v7()).await,
        Err(Error::SessionNotFound(_))
    ));
    t.store.delete_session(id).await.unwrap();
    assert!(matches!(
        t.store.get_session(id).await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.compaction(id).await,
        Err(Error::SessionNotFound(_))
    ));
}

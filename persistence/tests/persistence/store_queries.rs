//! Queries the journal suite does not reach, run against both backends: keyset paging of
//! compaction candidates and sessions, the values a lease conflict reports, and purges.

use std::time::Duration;
use stead_model::Epoch;

use chrono::{DateTime, Utc};
use serde_json::json;
use stead_persistence::request_log::{RequestLogEntry, RequestLogQuery};
use stead_persistence::{Backend, DatabaseUrl, Error, NewEvent, NewSession, SessionQuery};
use stead_testkit::db;
use uuid::Uuid;

use crate::request_log::{entry, list};

stead_testkit::both_backends!(
    compaction_candidates_page_by_time_and_id,
    lease_conflicts_report_the_holder,
    sessions_page_with_filters_and_cursor,
    a_purge_leaves_nothing_of_the_session,
    removing_a_session_leaves_no_journal_rows_though_appends_race,
);

async fn compaction_candidates_page_by_time_and_id(backend: Backend) {
    let t = db::open(backend).await;
    let mut ended = Vec::new();
    for i in 0..5 {
        let id = t
            .store
            .create_session(NewSession::for_agent("c"))
            .await
            .unwrap()
            .id;
        t.store
            .append(id, 0, vec![stead_persistence::NewEvent::new("k", json!(i))])
            .await
            .unwrap();
        if i != 2 {
            ended.push(t.store.close_session(id).await.unwrap());
        }
    }
    // An ended session without events is no candidate.
    let empty = t
        .store
        .create_session(NewSession::for_agent("c"))
        .await
        .unwrap()
        .id;
    t.store.close_session(empty).await.unwrap();

    let mut want: Vec<(Uuid, DateTime<Utc>)> = ended.iter().map(|s| (s.id, s.updated_at)).collect();
    want.sort_by_key(|(id, at)| (*at, *id));
    let far_future = Utc::now() + chrono::Duration::days(1);
    assert_eq!(
        t.store
            .compaction_candidates(far_future, None, 100)
            .await
            .unwrap(),
        want
    );
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = t
            .store
            .compaction_candidates(far_future, after, 1)
            .await
            .unwrap();
        let Some(&(id, at)) = page.first() else {
            break;
        };
        assert_eq!(page.len(), 1);
        seen.push((id, at));
        after = Some((at, id));
    }
    assert_eq!(seen, want);
    // Only sessions last changed before `before`.
    assert_eq!(
        t.store
            .compaction_candidates(want[2].1, None, 100)
            .await
            .unwrap(),
        want.iter()
            .copied()
            .filter(|(_, at)| *at < want[2].1)
            .collect::<Vec<_>>()
    );
    // The same time with a smaller id is still after the position.
    let tie = t
        .store
        .compaction_candidates(far_future, Some((want[1].1, Uuid::nil())), 100)
        .await
        .unwrap();
    let after_tie: Vec<_> = want
        .iter()
        .copied()
        .filter(|(id, at)| (*at, *id) > (want[1].1, Uuid::nil()))
        .collect();
    assert_eq!(tie, after_tie);
    assert!(after_tie.len() >= 3);
    t.finish().await;
}

async fn lease_conflicts_report_the_holder(backend: Backend) {
    let t = db::open(backend).await;
    let id = t
        .store
        .create_session(NewSession::for_agent("l"))
        .await
        .unwrap()
        .id;
    let a = t
        .store
        .acquire_lease(id, "node-a", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(a.epoch, Epoch(1));
    match t
        .store
        .acquire_lease(id, "node-b", Duration::from_secs(60))
        .await
    {
        Err(Error::LeaseHeld {
            session_id,
            owner,
            until,
        }) => {
            assert_eq!(
                (session_id, owner, until),
                (id, "node-a".into(), a.expires_at)
            );
        }
        other => panic!("expected LeaseHeld, got {other:?}"),
    }
    let renewed = t
        .store
        .renew_lease(id, "node-a", a.epoch, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(renewed.epoch, a.epoch);
    assert!(renewed.expires_at > a.expires_at);
    assert!(matches!(
        t.store.renew_lease(id, "node-b", a.epoch, Duration::from_secs(1)).await,
        Err(Error::Fenced { held, current, .. }) if held == a.epoch && current == a.epoch
    ));
    assert!(matches!(
        t.store
            .renew_lease(Uuid::now_v7(), "node-a", Epoch(1), Duration::from_secs(1))
            .await,
        Err(Error::SessionNotFound(_))
    ));
    // Releasing at a stale epoch or as another owner changes nothing.
    t.store.release_lease(id, "node-b", a.epoch).await.unwrap();
    t.store.release_lease(id, "node-a", Epoch(7)).await.unwrap();
    assert!(matches!(
        t.store
            .acquire_lease(id, "node-b", Duration::from_secs(60))
            .await,
        Err(Error::LeaseHeld { .. })
    ));
    t.store.release_lease(id, "node-a", a.epoch).await.unwrap();
    t.store
        .release_lease(Uuid::now_v7(), "node-a", Epoch(1))
        .await
        .unwrap();
    let b = t
        .store
        .acquire_lease(id, "node-b", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(b.epoch, Epoch(2));
    t.finish().await;
}

async fn sessions_page_with_filters_and_cursor(backend: Backend) {
    let t = db::open(backend).await;
    // Fixed ids that sort against creation order, so the id part of the cursor matters only
    // when times tie.
    let mut made = Vec::new();
    for i in 0..7u32 {
        let session = t
            .store
            .create_session(NewSession {
                project_id: stead_persistence::DEFAULT_PROJECT,
                id: Some(Uuid::from_u128(u128::from(100 - i))),
                agent: if i % 2 == 0 { "even" } else { "odd" }.into(),
                metadata: json!({ "i": i }),
                parent: None,
            })
            .await
            .unwrap();
        assert_eq!(t.store.get_session(session.id).await.unwrap(), session);
        made.push(session);
    }
    let duplicate = t
        .store
        .create_session(NewSession {
            project_id: stead_persistence::DEFAULT_PROJECT,
            id: Some(made[0].id),
            agent: "x".into(),
            metadata: json!({}),
            parent: None,
        })
        .await;
    assert!(matches!(duplicate, Err(Error::InvalidInput(_))));
    let mut want = made.clone();
    want.sort_by_key(|s| std::cmp::Reverse((s.created_at, s.id)));
    let even: Vec<_> = want.iter().filter(|s| s.agent == "even").cloned().collect();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = t
            .store
            .list_sessions(&SessionQuery {
                scope: stead_persistence::Scope::Installation,
                agent: Some("even".into()),
                limit: 2,
                cursor: cursor.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        seen.extend(page.sessions);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, even);
    t.finish().await;
}

/// `purge_session` removes the row, journal, snapshot, KV entries, compaction and request-log
/// rows of one session, in one transaction, and nothing of any other session.
async fn a_purge_leaves_nothing_of_the_session(backend: Backend) {
    let t = db::open(backend).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let id = t
            .store
            .create_session(NewSession::for_agent("private"))
            .await
            .unwrap()
            .id;
        let events = (0..5)
            .map(|i| NewEvent::new("user_message", json!({ "text": format!("secret {i}") })))
            .collect();
        t.store.append(id, 0, events).await.unwrap();
        t.store
            .put_snapshot(id, 5, json!({ "transcript": ["secret"] }))
            .await
            .unwrap();
        t.store
            .kv_set(id, "note", json!("a secret note"))
            .await
            .unwrap();
        let rows: Vec<RequestLogEntry> = (0..3)
            .map(|n| entry(n, "chat", Utc::now(), Some(id)))
            .collect();
        t.store.insert_request_log(&rows).await.unwrap();
        ids.push(id);
    }
    let (gone, kept) = (ids[0], ids[1]);
    let purged = t.store.purge_session(gone).await.unwrap();
    assert_eq!((purged.events, purged.request_log_rows), (5, 3));

    assert!(matches!(
        t.store.get_session(gone).await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(t
        .store
        .read(gone, 0, 100)
        .await
        .map_or(true, |e| e.is_empty()));
    assert!(t
        .store
        .latest_snapshot(gone)
        .await
        .map_or(true, |s| s.is_none()));
    assert!(t
        .store
        .kv_list(gone, "")
        .await
        .map_or(true, |e| e.is_empty()));
    let by_session = |id| RequestLogQuery {
        session_id: Some(id),
        limit: 100,
        ..Default::default()
    };
    assert!(list(t.store.as_ref(), by_session(gone)).await.is_empty());
    // A second purge finds nothing; the other session is whole.
    assert!(matches!(
        t.store.purge_session(gone).await,
        Err(Error::SessionNotFound(_))
    ));
    assert_eq!(t.store.read(kept, 0, 100).await.unwrap().len(), 5);
    assert!(t.store.latest_snapshot(kept).await.unwrap().is_some());
    assert_eq!(t.store.kv_list(kept, "").await.unwrap().len(), 1);
    assert_eq!(list(t.store.as_ref(), by_session(kept)).await.len(), 3);
}

/// On PostgreSQL, leases are judged by the database's clock: a node whose clock runs an hour
/// ahead does not see another node's live lease as expired (it would take the session, and two
/// actors would run it until fencing caught the first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_fast_clock_cannot_take_a_live_lease_on_postgres() {
    let t = db::open(Backend::Postgres).await;
    let mut options = stead_persistence::StoreOptions::new(t.url.clone());
    options.run_migrations = false;
    options.clock_skew = chrono::Duration::hours(1);
    let ahead = stead_persistence::open(options).await.unwrap();
    let id = t
        .store
        .create_session(NewSession::for_agent("leased"))
        .await
        .unwrap()
        .id;
    let ttl = Duration::from_secs(30);
    let held = t.store.acquire_lease(id, "node-a", ttl).await.unwrap();
    match ahead.acquire_lease(id, "node-b", ttl).await {
        Err(Error::LeaseHeld { owner, .. }) => assert_eq!(owner, "node-a"),
        other => panic!("the fast node took a live lease: {other:?}"),
    }
    // The expiry was set by the database, not by either node's clock.
    let renewed = ahead.renew_lease(id, "node-b", held.epoch, ttl).await;
    assert!(matches!(renewed, Err(Error::Fenced { .. })), "{renewed:?}");
    let again = t
        .store
        .renew_lease(id, "node-a", held.epoch, ttl)
        .await
        .unwrap();
    assert!(again.expires_at >= held.expires_at);
    ahead.shutdown().await;
    t.finish().await;
}

/// Sessions deleted (`delete_session`) and purged (`purge_session`) while an appender per
/// session keeps appending: each appender ends on `SessionNotFound` or `Conflict`, never on a
/// failed commit, and no journal row of a removed session is left (PostgreSQL's journal has no
/// foreign key to cascade since migration 28); the session kept aside keeps every event it was
/// acknowledged.
async fn removing_a_session_leaves_no_journal_rows_though_appends_race(backend: Backend) {
    let t = db::open(backend).await;
    let mut ids = Vec::new();
    for _ in 0..13 {
        let session = t.store.create_session(NewSession::for_agent("r")).await;
        ids.push(session.unwrap().id);
    }
    let appenders: Vec<_> = ids
        .iter()
        .map(|&id| {
            let store = t.store.clone();
            tokio::spawn(async move {
                let mut last = 0;
                loop {
                    let event = NewEvent::new("user_message", json!({ "n": last }));
                    match store.append(id, last, vec![event]).await {
                        Ok(_) if last == 300 => return (last, None),
                        Ok(_) => last += 1,
                        Err(error) => return (last, Some(error)),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let (kept, removed) = ids.split_first().unwrap();
    for (n, &id) in removed.iter().enumerate() {
        if n % 2 == 0 {
            t.store.delete_session(id).await.unwrap();
        } else {
            t.store.purge_session(id).await.unwrap();
        }
    }
    let mut acknowledged = Vec::new();
    for appender in appenders {
        let (last, error) = appender.await.unwrap();
        acknowledged.push(last);
        if let Some(error) = error {
            assert!(
                matches!(error, Error::SessionNotFound(_) | Error::Conflict { .. }),
                "{error:?}"
            );
        }
    }
    assert!(acknowledged[1..].iter().any(|&n| n > 0), "{acknowledged:?}");
    assert_eq!(
        acknowledged[0], 300,
        "the kept session's appender was refused"
    );
    assert_eq!(journal_rows(&t.url).await, 301);
    assert_eq!(t.store.read(*kept, 0, 1000).await.unwrap().len(), 301);
    t.finish().await;
}

/// Rows in the journal table, counted by SQL beside the store.
async fn journal_rows(url: &DatabaseUrl) -> i64 {
    let statement = "SELECT count(*) FROM journal";
    match url {
        DatabaseUrl::Sqlite(path) => {
            let url = format!("sqlite://{}", path.display());
            let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
            let count = sqlx::query_scalar(statement).fetch_one(&pool).await;
            pool.close().await;
            count.unwrap()
        }
        DatabaseUrl::Postgres(url) => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            let count = sqlx::query_scalar(statement).fetch_one(&pool).await;
            pool.close().await;
            count.unwrap()
        }
    }
}

//! Queries the journal suite does not reach, run against both backends: the request log (rows,
//! filters, pages, statistics), keyset paging of compaction candidates, and the values a lease
//! conflict reports.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use stead_persistence::request_log::{RequestLogEntry, RequestLogQuery, StatsGroupBy};
use stead_persistence::{Backend, Error, JournalStore, NewEvent, NewSession, SessionQuery};
use stead_testkit::db;
use uuid::Uuid;

stead_testkit::both_backends!(
    request_log_round_trips_filters_and_pages,
    request_log_statistics_group_and_filter,
    compaction_candidates_page_by_time_and_id,
    lease_conflicts_report_the_holder,
    sessions_page_with_filters_and_cursor,
    a_purge_leaves_nothing_of_the_session,
);

fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap()
}

fn entry(n: u32, route: &str, at: DateTime<Utc>, session: Option<Uuid>) -> RequestLogEntry {
    RequestLogEntry {
        id: Uuid::now_v7(),
        at: micros(at),
        session_id: session,
        api_key: (n % 2 == 0).then(|| format!("key-{n}")),
        route: route.to_string(),
        provider: Some(if n % 3 == 0 { "openai" } else { "local" }.to_string()),
        model: (n != 4).then(|| format!("model-{}", n % 2)),
        status: if n % 4 == 3 { "error" } else { "ok" }.to_string(),
        attempts: json!([{ "target": "a", "n": n }]),
        latency_ms: f64::from(n) * 10.5,
        ttft_ms: (n % 2 == 1).then(|| f64::from(n) * 1.25),
        tokens_in: i64::from(n) * 100,
        tokens_out: i64::from(n) * 7,
        cost: f64::from(n) * 0.001,
        cache_hit: n % 3 == 1,
        stream: n % 2 == 0,
        metadata: json!({ "team": if n < 3 { "ops" } else { "web" }, "n": n, "x_y": "lit" }),
        error: (n % 4 == 3).then(|| format!("failure {n}")),
        bodies: if n % 2 == 0 {
            json!({ "request": { "messages": [{ "role": "user", "content": format!("q{n}") }] },
                    "response": { "text": format!("a{n}"), "tool_calls": [] } })
        } else {
            serde_json::Value::Null
        },
    }
}

async fn list(store: &dyn JournalStore, query: RequestLogQuery) -> Vec<RequestLogEntry> {
    store.list_request_log(&query).await.unwrap().entries
}

async fn request_log_round_trips_filters_and_pages(backend: Backend) {
    let t = db::open(backend).await;
    let session = t
        .store
        .create_session(NewSession::for_agent("log"))
        .await
        .unwrap()
        .id;
    let base = Utc::now() - chrono::Duration::hours(1);
    let mut entries = Vec::new();
    for n in 0..7u32 {
        let route = if n % 2 == 0 { "chat" } else { "embed" };
        let at = base + chrono::Duration::minutes(i64::from(n));
        entries.push(entry(n, route, at, (n < 4).then_some(session)));
    }
    t.store.insert_request_log(&entries[..4]).await.unwrap();
    // A row inserted again is ignored: the first one stays.
    let mut again = entries[1].clone();
    again.route = "changed".into();
    t.store
        .insert_request_log(&[again, entries[4].clone(), entries[5].clone()])
        .await
        .unwrap();
    t.store.insert_request_log(&entries[6..]).await.unwrap();
    t.store.insert_request_log(&[]).await.unwrap();

    let mut newest_first = entries.clone();
    newest_first.sort_by_key(|e| std::cmp::Reverse(e.id));
    assert_eq!(
        list(&*t.store, RequestLogQuery::default()).await,
        newest_first
    );

    // Pages of 3 by cursor.
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = t
            .store
            .list_request_log(&RequestLogQuery {
                limit: 3,
                cursor: cursor.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        pages += 1;
        seen.extend(page.entries);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, newest_first);

    let ids = |rows: Vec<RequestLogEntry>| rows.into_iter().map(|e| e.id).collect::<Vec<_>>();
    let expect = |keep: &dyn Fn(&RequestLogEntry) -> bool| {
        newest_first
            .iter()
            .filter(|e| keep(e))
            .map(|e| e.id)
            .collect::<Vec<_>>()
    };
    let cases: Vec<(RequestLogQuery, Vec<Uuid>)> = vec![
        (
            RequestLogQuery {
                route: Some("chat".into()),
                ..Default::default()
            },
            expect(&|e| e.route == "chat"),
        ),
        (
            RequestLogQuery {
                provider: Some("openai".into()),
                ..Default::default()
            },
            expect(&|e| e.provider.as_deref() == Some("openai")),
        ),
        (
            RequestLogQuery {
                model: Some("model-1".into()),
                ..Default::default()
            },
            expect(&|e| e.model.as_deref() == Some("model-1")),
        ),
        (
            RequestLogQuery {
                status: Some("error".into()),
                ..Default::default()
            },
            expect(&|e| e.status == "error"),
        ),
        (
            RequestLogQuery {
                api_key: Some("key-2".into()),
                ..Default::default()
            },
            expect(&|e| e.api_key.as_deref() == Some("key-2")),
        ),
        (
            RequestLogQuery {
                session_id: Some(session),
                ..Default::default()
            },
            expect(&|e| e.session_id == Some(session)),
        ),
        (
            RequestLogQuery {
                cache_hit: Some(true),
                ..Default::default()
            },
            expect(&|e| e.cache_hit),
        ),
        (
            RequestLogQuery {
                since: Some(entries[2].at),
                until: Some(entries[5].at),
                ..Default::default()
            },
            expect(&|e| e.at >= entries[2].at && e.at < entries[5].at),
        ),
        (
            RequestLogQuery {
                metadata: Some(("team".into(), "ops".into())),
                ..Default::default()
            },
            expect(&|e| e.metadata["team"] == "ops"),
        ),
        (
            RequestLogQuery {
                metadata: Some(("n".into(), "5".into())),
                ..Default::default()
            },
            expect(&|e| e.metadata["n"] == 5),
        ),
        (
            RequestLogQuery {
                route: Some("chat".into()),
                cache_hit: Some(false),
                metadata: Some(("team".into(), "web".into())),
                ..Default::default()
            },
            expect(&|e| e.route == "chat" && !e.cache_hit && e.metadata["team"] == "web"),
        ),
    ];
    for (query, want) in cases {
        assert!(!want.is_empty() || query.status.is_some(), "{query:?}");
        assert_eq!(ids(list(&*t.store, query.clone()).await), want, "{query:?}");
    }

    for bad in [
        RequestLogQuery {
            cursor: Some("nope".into()),
            ..Default::default()
        },
        RequestLogQuery {
            metadata: Some(("a'b".into(), "x".into())),
            ..Default::default()
        },
    ] {
        assert!(matches!(
            t.store.list_request_log(&bad).await,
            Err(Error::InvalidInput(_))
        ));
    }
    t.finish().await;
}

async fn request_log_statistics_group_and_filter(backend: Backend) {
    let t = db::open(backend).await;
    let base = Utc::now() - chrono::Duration::hours(1);
    let entries: Vec<RequestLogEntry> = (0..9u32)
        .map(|n| {
            let route = ["chat", "embed", "rerank"][n as usize % 3];
            entry(
                n,
                route,
                base + chrono::Duration::seconds(i64::from(n)),
                None,
            )
        })
        .collect();
    t.store.insert_request_log(&entries).await.unwrap();

    let by_route = t
        .store
        .request_log_stats(&RequestLogQuery::default(), &StatsGroupBy::Route)
        .await
        .unwrap();
    assert_eq!(
        by_route
            .iter()
            .map(|r| (r.key.clone(), r.count))
            .collect::<Vec<_>>(),
        vec![
            (Some("chat".into()), 3),
            (Some("embed".into()), 3),
            (Some("rerank".into()), 3)
        ]
    );
    let chat = &by_route[0];
    // chat: n = 0, 3, 6.
    assert_eq!(chat.errors, 1);
    assert_eq!(chat.cache_hits, 0);
    assert_eq!(chat.tokens_in, 900);
    assert_eq!(chat.tokens_out, 63);
    assert_eq!(chat.latency_p50_ms, 31.5);
    assert_eq!(chat.latency_p99_ms, 63.0);
    assert_eq!(chat.ttft_p50_ms, Some(3.75));
    assert!((chat.cost - 0.009).abs() < 1e-12);

    let by_model = t
        .store
        .request_log_stats(&RequestLogQuery::default(), &StatsGroupBy::Model)
        .await
        .unwrap();
    assert_eq!(
        by_model
            .iter()
            .map(|r| (r.key.clone(), r.count))
            .collect::<Vec<_>>(),
        vec![
            (None, 1),
            (Some("model-0".into()), 4),
            (Some("model-1".into()), 4)
        ]
    );

    let by_team = t
        .store
        .request_log_stats(
            &RequestLogQuery {
                route: Some("chat".into()),
                ..Default::default()
            },
            &StatsGroupBy::Metadata("team".into()),
        )
        .await
        .unwrap();
    assert_eq!(
        by_team
            .iter()
            .map(|r| (r.key.clone(), r.count))
            .collect::<Vec<_>>(),
        vec![(Some("ops".into()), 1), (Some("web".into()), 2)]
    );
    let by_missing = t
        .store
        .request_log_stats(
            &RequestLogQuery::default(),
            &StatsGroupBy::Metadata("absent".into()),
        )
        .await
        .unwrap();
    assert_eq!(
        by_missing
            .iter()
            .map(|r| (r.key.clone(), r.count))
            .collect::<Vec<_>>(),
        vec![(None, 9)]
    );
    let by_provider = t
        .store
        .request_log_stats(
            &RequestLogQuery {
                metadata: Some(("x_y".into(), "lit".into())),
                status: Some("ok".into()),
                ..Default::default()
            },
            &StatsGroupBy::Provider,
        )
        .await
        .unwrap();
    assert_eq!(
        by_provider
            .iter()
            .map(|r| (r.key.clone(), r.count, r.errors))
            .collect::<Vec<_>>(),
        vec![(Some("local".into()), 5, 0), (Some("openai".into()), 2, 0)]
    );
    assert!(matches!(
        t.store
            .request_log_stats(
                &RequestLogQuery::default(),
                &StatsGroupBy::Metadata("a b".into())
            )
            .await,
        Err(Error::InvalidInput(_))
    ));
    t.finish().await;
}

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
    assert_eq!(a.epoch, 1);
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
            .renew_lease(Uuid::now_v7(), "node-a", 1, Duration::from_secs(1))
            .await,
        Err(Error::SessionNotFound(_))
    ));
    // Releasing at a stale epoch or as another owner changes nothing.
    t.store.release_lease(id, "node-b", a.epoch).await.unwrap();
    t.store.release_lease(id, "node-a", 7).await.unwrap();
    assert!(matches!(
        t.store
            .acquire_lease(id, "node-b", Duration::from_secs(60))
            .await,
        Err(Error::LeaseHeld { .. })
    ));
    t.store.release_lease(id, "node-a", a.epoch).await.unwrap();
    t.store
        .release_lease(Uuid::now_v7(), "node-a", 1)
        .await
        .unwrap();
    let b = t
        .store
        .acquire_lease(id, "node-b", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(b.epoch, 2);
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
                id: Some(Uuid::from_u128(u128::from(100 - i))),
                agent: if i % 2 == 0 { "even" } else { "odd" }.into(),
                metadata: json!({ "i": i }),
            })
            .await
            .unwrap();
        assert_eq!(t.store.get_session(session.id).await.unwrap(), session);
        made.push(session);
    }
    let duplicate = t
        .store
        .create_session(NewSession {
            id: Some(made[0].id),
            agent: "x".into(),
            metadata: json!({}),
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

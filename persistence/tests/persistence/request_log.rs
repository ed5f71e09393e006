//! The request log against both backends: rows, filters, pages and statistics.

use chrono::{DateTime, Utc};
use serde_json::json;
use stead_persistence::request_log::{
    AttemptRecord, LogStatus, RequestLogEntry, RequestLogQuery, SpendScope, StatsGroupBy,
};
use stead_persistence::{Backend, Error, JournalStore, NewSession};
use stead_testkit::db;
use uuid::Uuid;

stead_testkit::both_backends!(
    request_log_round_trips_filters_and_pages,
    request_log_statistics_group_and_filter,
);

fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap()
}

pub(crate) fn entry(
    n: u32,
    route: &str,
    at: DateTime<Utc>,
    session: Option<Uuid>,
) -> RequestLogEntry {
    RequestLogEntry {
        id: Uuid::now_v7(),
        at: micros(at),
        session_id: session,
        api_key: (n % 2 == 0).then(|| format!("key-{n}")),
        route: route.to_string(),
        provider: Some(if n % 3 == 0 { "openai" } else { "local" }.to_string()),
        model: (n != 4).then(|| format!("model-{}", n % 2)),
        status: if n % 4 == 3 {
            LogStatus::Error
        } else {
            LogStatus::Ok
        },
        attempts: vec![AttemptRecord {
            provider: "a".into(),
            model: format!("m{n}"),
            outcome: "ok".into(),
            error_kind: None,
            status: None,
            error: None,
            retry_after_ms: None,
            latency_ms: f64::from(n),
            streamed_chars: n as usize,
        }],
        latency_ms: f64::from(n) * 10.5,
        ttft_ms: (n % 2 == 1).then(|| f64::from(n) * 1.25),
        tokens_in: u64::from(n) * 100,
        tokens_out: u64::from(n) * 7,
        cost: f64::from(n) * 0.001,
        cache_hit: n % 3 == 1,
        stream: n % 2 == 0,
        metadata: json!({ "team": if n < 3 { "ops" } else { "web" }, "n": n, "x_y": "lit" })
            .as_object()
            .cloned()
            .unwrap_or_default(),
        error: (n % 4 == 3).then(|| format!("failure {n}")),
        bodies: if n % 2 == 0 {
            json!({ "request": { "messages": [{ "role": "user", "content": format!("q{n}") }] },
                    "response": { "text": format!("a{n}"), "tool_calls": [] } })
        } else {
            serde_json::Value::Null
        },
        guardrails: if n % 3 == 2 {
            vec![stead_model::log::GuardrailEntry {
                guardrail: "pii-out".into(),
                place: "request".into(),
                effect: "redact".into(),
                entities: vec!["EMAIL".into(), "CARD".into()],
            }]
        } else {
            Vec::new()
        },
    }
}

pub(crate) async fn list(store: &dyn JournalStore, query: RequestLogQuery) -> Vec<RequestLogEntry> {
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
            expect(&|e| e.status == LogStatus::Error),
        ),
        (
            RequestLogQuery {
                api_key: Some("key-2".into()),
                ..Default::default()
            },
            expect(&|e| e.api_key.as_deref() == Some("key-2")),
        ),
        (
            // A project's view: the calls charged to its keys.
            RequestLogQuery {
                scope: Some(SpendScope {
                    api_keys: vec!["key-2".into(), "key-4".into()],
                    ..Default::default()
                }),
                ..Default::default()
            },
            expect(&|e| matches!(e.api_key.as_deref(), Some("key-2" | "key-4"))),
        ),
        (
            // ... and to its people, by prefix; with another filter.
            RequestLogQuery {
                scope: Some(SpendScope {
                    prefix: Some("key-".into()),
                    ..Default::default()
                }),
                route: Some("chat".into()),
                ..Default::default()
            },
            expect(&|e| e.api_key.is_some() && e.route == "chat"),
        ),
        (
            // The default project's: what no virtual key or project's person was charged.
            RequestLogQuery {
                scope: Some(SpendScope {
                    installation: true,
                    ..Default::default()
                }),
                ..Default::default()
            },
            newest_first.iter().map(|e| e.id).collect(),
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
    // A project no call was charged within sees none.
    let nobody = RequestLogQuery {
        scope: Some(SpendScope::default()),
        ..Default::default()
    };
    assert!(list(&*t.store, nobody).await.is_empty());

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

//! Snapshots, key-value storage, refused input and idempotent migrations.

use super::*;

stead_testkit::both_backends!(
    snapshots_keep_the_newest,
    key_value_storage,
    bad_input_is_refused,
    migrations_are_idempotent,
);

async fn snapshots_keep_the_newest(backend: Backend) {
    let t = db::open(backend).await;
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
    let t = db::open(backend).await;
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
    let t = db::open(backend).await;
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
    let t = db::open(backend).await;
    let report = t.store.migrate().await.unwrap();
    assert!(report.applied.is_empty(), "nothing left to apply");
    assert!(report.current.is_some());
    let ids: HashSet<Uuid> = HashSet::from([new_session(&t.store).await]);
    assert_eq!(ids.len(), 1);
    t.finish().await;
}

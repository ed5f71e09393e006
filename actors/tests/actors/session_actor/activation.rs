//! Activation and passivation under contention: a session whose activation is stuck on the
//! database does not hold up the others, and an input that races a passivation is applied —
//! never lost with an error.

use stead_actors::session::Lifecycle;
use stead_persistence::Backend;
use stead_testkit::db;

use super::*;

/// Activation holds a lock for one session only. Session `a`'s row is locked by another
/// transaction, so its activation waits in the lease acquisition; `b` activates meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_activation_does_not_hold_up_other_sessions() {
    use sqlx::{Connection, Executor};
    let t = db::open(Backend::Postgres).await;
    let store = t.store.clone();
    let (url, _) = ops::webhook().await;
    let a = new_session(&store).await;
    let b = new_session(&store).await;
    let mut conn = sqlx::PgConnection::connect(&db::url_string(&t.url))
        .await
        .unwrap();
    let mut lock = conn.begin().await.unwrap();
    lock.execute(sqlx::query("SELECT id FROM sessions WHERE id = $1 FOR UPDATE").bind(a))
        .await
        .unwrap();
    let registry = Arc::new(SessionRegistry::new(
        store.clone(),
        ScriptedModel::new(vec![]),
        vec![agent(&url)],
    ));
    let stuck = {
        let registry = registry.clone();
        tokio::spawn(async move { registry.session(a).await.map(|_| ()) })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !stuck.is_finished(),
        "a's activation should wait on the row lock"
    );
    let other = tokio::time::timeout(Duration::from_secs(10), registry.session(b)).await;
    assert!(
        matches!(other, Ok(Ok(_))),
        "b's activation waited for a's: {:?}",
        other.map(|r| r.map(|_| ()))
    );
    assert!(!stuck.is_finished());
    lock.rollback().await.unwrap();
    stuck.await.unwrap().unwrap();
    registry.stop_all();
    t.finish().await;
}

/// Inputs sent just as the actor passivates are applied: each send succeeds, and the journal
/// has every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_racing_a_passivation_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = ops::webhook().await;
    let lifecycle = Lifecycle {
        passivate_after: Duration::from_millis(12),
        ..Lifecycle::default()
    };
    let replies: Vec<(&str, Vec<(&str, serde_json::Value)>)> = vec![("ok", vec![]); 200];
    let registry = SessionRegistry::new(
        store.clone(),
        ScriptedModel::new(replies),
        vec![agent(&url)],
    )
    .with_lifecycle(lifecycle);
    let id = new_session(&store).await;
    let sends = 120;
    for i in 0..sends {
        // Around the passivation deadline: some sends meet a live actor, some a stopping one.
        tokio::time::sleep(Duration::from_millis(9 + (i % 7) as u64)).await;
        registry
            .send(
                id,
                Input::UserMessage {
                    text: format!("message {i}"),
                    client_id: Some(format!("c{i}")),
                    mode: None,
                    attachments: Vec::new(),
                },
            )
            .await
            .unwrap_or_else(|e| panic!("send {i} failed: {e}"));
    }
    // Every message is journaled once.
    let mut users = 0;
    let mut after = 0;
    loop {
        let page = store.read(id, after, 1000).await.unwrap();
        if page.is_empty() {
            break;
        }
        after = page.last().unwrap().seq;
        users += page.iter().filter(|e| e.kind == "user_message").count();
    }
    assert_eq!(users, sends);
    registry.stop_all();
    store.shutdown().await;
}

/// An input left in the mailbox when the actor ends is sent again to a fresh activation, not
/// failed: ractor drops what is queued behind the end (a stop, or a passivation's drain marker
/// that a send passed just before it was placed). The session row is locked so the first
/// input's commit waits; the second queues behind it; the actor is stopped meanwhile. Before the
/// fix the second send failed with "the session actor stopped".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_queued_when_the_actor_ends_goes_to_a_fresh_activation() {
    use sqlx::{Connection, Executor};
    let t = db::open(Backend::Postgres).await;
    let store = t.store.clone();
    let (url, _) = ops::webhook().await;
    let replies: Vec<(&str, Vec<(&str, serde_json::Value)>)> = vec![("ok", vec![]); 4];
    let registry = Arc::new(SessionRegistry::new(
        store.clone(),
        ScriptedModel::new(replies),
        vec![agent(&url)],
    ));
    let id = new_session(&store).await;
    let first_actor = registry.session(id).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&db::url_string(&t.url))
        .await
        .unwrap();
    let mut lock = conn.begin().await.unwrap();
    lock.execute(sqlx::query("SELECT id FROM sessions WHERE id = $1 FOR UPDATE").bind(id))
        .await
        .unwrap();
    let send = |n: usize| {
        let registry = registry.clone();
        tokio::spawn(async move {
            let input = Input::UserMessage {
                text: format!("message {n}"),
                client_id: Some(format!("c{n}")),
                mode: None,
                attachments: Vec::new(),
            };
            registry.send(id, input).await
        })
    };
    let first = send(1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !first.is_finished(),
        "the first input's commit should wait on the row lock"
    );
    let second = send(2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!second.is_finished());
    // Ends after the input it is handling: the queued one is dropped with the mailbox.
    first_actor.stop(Some("test: the actor ends".into()));
    lock.rollback().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(20), first).await;
    let second = tokio::time::timeout(Duration::from_secs(20), second).await;
    assert!(matches!(first, Ok(Ok(Ok(_)))), "first: {first:?}");
    assert!(matches!(second, Ok(Ok(Ok(_)))), "second: {second:?}");
    assert!(matches!(
        first_actor.get_status(),
        ractor::ActorStatus::Stopped
    ));
    let events = store.read(id, 0, 1000).await.unwrap();
    let texts: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "user_message")
        .map(|e| e.payload["text"].clone())
        .collect();
    assert_eq!(
        texts,
        vec![
            serde_json::json!("message 1"),
            serde_json::json!("message 2")
        ]
    );
    registry.stop_all();
    t.finish().await;
}

/// A passivated actor leaves the registry by itself: twenty sessions that passivate and are
/// never asked for again leave no entry behind, with nobody calling `prune` (before, only a
/// `/metrics` scrape pruned, and a server nobody scraped grew by one entry per session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passivated_actors_leave_the_registry_without_a_prune() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = ops::webhook().await;
    let lifecycle = Lifecycle {
        passivate_after: Duration::from_millis(20),
        ..Lifecycle::default()
    };
    let replies: Vec<(&str, Vec<(&str, serde_json::Value)>)> = vec![("ok", vec![]); 20];
    let registry = SessionRegistry::new(
        store.clone(),
        ScriptedModel::new(replies),
        vec![agent(&url)],
    )
    .with_lifecycle(lifecycle);
    for i in 0..20 {
        let id = new_session(&store).await;
        registry
            .send(
                id,
                Input::UserMessage {
                    text: format!("message {i}"),
                    client_id: None,
                    mode: None,
                    attachments: Vec::new(),
                },
            )
            .await
            .unwrap();
    }
    assert!(registry.live_count() > 0, "no actor was live");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while registry.live_count() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} stopped actors are still held",
            registry.live_count()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

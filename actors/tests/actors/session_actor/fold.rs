//! `fold_until` (what `GET …/state?at=N`, `stead replay state` and forks use) starts from the
//! session's latest snapshot when it is at or before the seq asked for, on both backends
//! (every `?at=` folded the whole journal), and from the start when it is after.

use stead_actors::replay::{fold_until, snapshot_document};
use stead_persistence::Backend;
use stead_testkit::db;

use super::*;

stead_testkit::both_backends!(a_fold_to_a_seq_starts_at_the_latest_snapshot_before_it);

async fn a_fold_to_a_seq_starts_at_the_latest_snapshot_before_it(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.store.clone();
    let id = new_session(&store).await;
    let events: Vec<stead_persistence::NewEvent> = (1..=6)
        .map(|n| {
            let (kind, payload) = SessionEvent::MemoryUpdated {
                text: format!("m{n}"),
                by: "operator:test".into(),
            }
            .to_parts();
            stead_persistence::NewEvent::new(kind, payload)
        })
        .collect();
    store.append(id, 0, events).await.unwrap();
    // A snapshot at seq 3 that carries a mark no event sets: a fold that started from it
    // keeps the mark.
    let mut marked = stead_actors::SessionState::default();
    for seq in 1..=3 {
        marked.apply(
            seq,
            &SessionEvent::MemoryUpdated {
                text: format!("m{seq}"),
                by: "operator:test".into(),
            },
        );
    }
    marked.summary = Some("from the snapshot".into());
    store
        .put_snapshot(id, 3, snapshot_document(&marked))
        .await
        .unwrap();

    let at_five = fold_until(store.as_ref(), id, 5).await.unwrap();
    assert_eq!(at_five.memory, "m5");
    assert_eq!(at_five.last_seq, 5);
    assert_eq!(at_five.summary.as_deref(), Some("from the snapshot"));
    let at_two = fold_until(store.as_ref(), id, 2).await.unwrap();
    assert_eq!(at_two.memory, "m2");
    assert_eq!(at_two.summary, None, "a snapshot after the seq is not used");
    db.finish().await;
}

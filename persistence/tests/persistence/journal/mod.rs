//! The journal contract, run against both backends. By topic: appends and reads (`appends`),
//! sessions, leases and compaction (`sessions`), cluster membership (`cluster`), strict budgets
//! shared by a cluster (`budgets`), knowledge collections (`knowledge`), snapshots, key-value storage, input checks
//! and migrations (`storage`).

mod appends;
mod budgets;
mod cluster;
mod knowledge;
mod sessions;
mod storage;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use serde_json::{json, Value};
use stead_persistence::{
    Backend, Error, JournalStore, NewEvent, NewSession, SessionQuery, SessionStatus,
};
use stead_testkit::db;
use uuid::Uuid;

/// Node `id` as one process registers it (its instance fixed by the id).
fn node(id: &str, starting: bool) -> stead_persistence::ClusterNode {
    let mut instance = [0u8; 16];
    for (slot, byte) in instance.iter_mut().zip(id.bytes()) {
        *slot = byte;
    }
    stead_persistence::ClusterNode {
        node_id: id.into(),
        advertise_url: format!("http://{id}.internal:8787"),
        version: "0.1.0".into(),
        instance: Uuid::from_bytes(instance),
        starting,
    }
}

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

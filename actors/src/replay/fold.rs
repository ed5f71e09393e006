//! Reading journals back and folding them: the versioned snapshot document, paged reads, the
//! state at any seq, and the state view.

use serde_json::{json, Value};
use stead_persistence::{Event, SessionStore};
use uuid::Uuid;

use super::ReplayError;
use crate::events::SessionEvent;
use crate::state::SessionState;

/// Version of the snapshot document (`{"version", "state"}`); a snapshot of another version is
/// ignored by activation (full replay).
pub const SNAPSHOT_VERSION: u64 = 1;

/// Events read per page.
pub(super) const PAGE: u32 = 1000;

/// The versioned document a snapshot (and a compaction) stores for a folded state.
pub fn snapshot_document(state: &SessionState) -> Value {
    json!({ "version": SNAPSHOT_VERSION, "state": state })
}

/// The state a snapshot document holds, when it is of this version.
pub fn state_from_document(document: &Value) -> Option<SessionState> {
    if document["version"] != SNAPSHOT_VERSION {
        return None;
    }
    serde_json::from_value(document["state"].clone()).ok()
}

/// One event as it is read back (unknown kinds from a newer Stead are kept untyped).
pub(super) fn typed(event: &Event) -> Option<SessionEvent> {
    SessionEvent::from_parts(&event.kind, &event.payload)
}

/// Every event of a session after `after`, in order.
pub async fn read_all(
    store: &dyn SessionStore,
    id: Uuid,
    after: i64,
) -> Result<Vec<Event>, ReplayError> {
    read_through(store, id, after, i64::MAX).await
}

/// The events of a session with `after < seq <= through`, in order.
pub(super) async fn read_through(
    store: &dyn SessionStore,
    id: Uuid,
    after: i64,
    through: i64,
) -> Result<Vec<Event>, ReplayError> {
    let mut events = Vec::new();
    let mut next = after;
    while next < through {
        let limit = (through - next).min(i64::from(PAGE)) as u32;
        let page = store.read(id, next, limit).await?;
        let done = page.len() < limit as usize;
        if let Some(last) = page.last() {
            next = last.seq;
        }
        events.extend(page);
        if done {
            break;
        }
    }
    Ok(events)
}

/// The state folded from the journal up to `at` (`1..=last seq`): what `state?at=N` answers.
/// A compacted session folds from its compaction's state; earlier seqs are gone.
pub async fn fold_until(
    store: &dyn SessionStore,
    id: Uuid,
    at: i64,
) -> Result<SessionState, ReplayError> {
    let mut folded = SessionState::default();
    if let Some(compaction) = store.compaction(id).await? {
        if at < compaction.through_seq {
            return Err(ReplayError::Compacted {
                through_seq: compaction.through_seq,
            });
        }
        folded = state_from_document(&compaction.state).ok_or_else(|| {
            ReplayError::Invalid("the compaction's state is of another version".into())
        })?;
    }
    // The latest snapshot, when it is at or before `at` (and after the compaction): only the
    // journal after it is read (every `?at=` folded the whole journal).
    if let Some(snapshot) = store.latest_snapshot(id).await? {
        if snapshot.seq <= at && snapshot.seq > folded.last_seq {
            if let Some(state) = state_from_document(&snapshot.state) {
                folded = state;
            }
        }
    }
    for event in read_through(store, id, folded.last_seq, at).await? {
        match typed(&event) {
            Some(typed) => folded.apply(event.seq, &typed),
            None => folded.last_seq = event.seq,
        }
    }
    Ok(folded)
}

/// The session's latest state from the database alone — its latest snapshot, then the journal
/// after it — without activating it (listings that span sessions read parked sessions this
/// way, on whichever node of a cluster they run, without taking their leases).
pub async fn fold_latest(store: &dyn SessionStore, id: Uuid) -> Result<SessionState, ReplayError> {
    let mut folded = SessionState::default();
    if let Some(snapshot) = store.latest_snapshot(id).await? {
        if let Some(state) = state_from_document(&snapshot.state) {
            folded = state;
        }
    }
    if folded.last_seq == 0 {
        if let Some(compaction) = store.compaction(id).await? {
            folded = state_from_document(&compaction.state).ok_or_else(|| {
                ReplayError::Invalid("the compaction's state is of another version".into())
            })?;
        }
    }
    loop {
        let page = store.read(id, folded.last_seq, 1000).await?;
        let done = page.len() < 1000;
        for event in &page {
            match typed(event) {
                Some(typed) => folded.apply(event.seq, &typed),
                None => folded.last_seq = event.seq,
            }
        }
        if done {
            return Ok(folded);
        }
    }
}

/// The state view `GET /v1/sessions/{id}/state` and `stead replay state` print.
pub fn state_view(id: Uuid, folded: &SessionState) -> Value {
    json!({
        "session_id": id,
        "seq": folded.last_seq,
        "status": folded.status(),
        "state": folded,
    })
}

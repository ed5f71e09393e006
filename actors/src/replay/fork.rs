//! Sessions written by copying a journal: forks, the all-or-nothing create-and-append that
//! imports share, and settling a copied session's row status.

use serde_json::{json, Value};
use stead_persistence::{Event, NewEvent, NewSession, Session, SessionStatus, SessionStore};
use uuid::Uuid;

use super::fold::read_through;
use super::{fold_until, ReplayError, IMPORTED_FROM};
use crate::events::{Overrides, SessionEvent};

/// A new session whose journal is a copy of `source`'s up to `at` (same seqs, kinds, payloads
/// and times) followed by `session_forked` with the overrides. Returns the new session's row
/// and last seq. The fork's model calls are charged to `principal` (who forked). The fork is not activated here: whatever was in flight at `at` carries on
/// when its actor starts.
pub async fn fork(
    store: &dyn SessionStore,
    source: &Session,
    at: i64,
    overrides: Overrides,
    principal: &str,
) -> Result<(Session, i64), ReplayError> {
    if at < 1 || at > source.last_seq {
        return Err(ReplayError::SeqOutOfRange {
            at,
            last_seq: source.last_seq,
        });
    }
    if let Some(compaction) = store.compaction(source.id).await? {
        // Events up to the cut are gone, and a fork's journal must start at seq 1.
        return Err(ReplayError::Compacted {
            through_seq: compaction.through_seq,
        });
    }
    let mut metadata = source.metadata.clone();
    if let Some(object) = metadata.as_object_mut() {
        object.insert(
            "forked_from".into(),
            json!({ "session_id": source.id, "at": at }),
        );
        // Imports of the source cover the copied prefix only as far as the fork point.
        if let Some(Value::Array(imports)) = object.get_mut(IMPORTED_FROM) {
            for entry in imports.iter_mut() {
                if let Some(through) = entry["through_seq"].as_i64() {
                    entry["through_seq"] = json!(through.min(at));
                }
            }
        }
    }
    let copied = read_through(store, source.id, 0, at).await?;
    let (kind, payload) = SessionEvent::SessionForked {
        from: source.id.to_string(),
        at,
        overrides,
        principal: Some(principal.to_string()),
    }
    .to_parts();
    let mut rows = new_events(&copied);
    rows.push(NewEvent::new(kind, payload));
    let row = create_with_journal(store, source.project_id, &source.agent, metadata, rows).await?;
    Ok((row, at + 1))
}

/// A new session of `project` holding `events` as its journal, written in one append (all or
/// nothing); the session is deleted again when the append fails, so no partial copy is left
/// behind.
pub async fn create_with_journal(
    store: &dyn SessionStore,
    project_id: uuid::Uuid,
    agent: &str,
    metadata: Value,
    events: Vec<NewEvent>,
) -> Result<Session, ReplayError> {
    let row = store
        .create_session(NewSession {
            project_id,
            id: None,
            agent: agent.to_string(),
            metadata,
            parent: None,
        })
        .await?;
    if let Err(error) = store.append(row.id, 0, events).await {
        if let Err(cleanup) = store.delete_session(row.id).await {
            tracing::warn!(session = %row.id, error = %cleanup, "could not remove a partial session");
        }
        return Err(error.into());
    }
    Ok(store.get_session(row.id).await?)
}

/// Writes the status the session's journal folds to onto its row (as the session actor would
/// once activated), for sessions written by copying: imports and forks.
pub async fn settle_status(store: &dyn SessionStore, id: Uuid) -> Result<Session, ReplayError> {
    let row = store.get_session(id).await?;
    let folded = fold_until(store, id, row.last_seq).await?;
    Ok(match folded.status() {
        SessionStatus::Closed => store.close_session(id).await?,
        status if status == row.status => row,
        status => store.update_status(id, status).await?,
    })
}

/// The same events, to append elsewhere with their original times.
fn new_events(events: &[Event]) -> Vec<NewEvent> {
    events
        .iter()
        .map(|e| NewEvent {
            kind: e.kind.clone(),
            payload: e.payload.clone(),
            created_at: e.created_at,
        })
        .collect()
}

//! Journal compaction: an ended session's events are replaced by its folded state and a
//! summary of what they were.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use stead_persistence::{Compaction, Event, SessionStatus, SessionStore};
use uuid::Uuid;

use super::fold::typed;
use super::{read_all, snapshot_document, state_from_document, ReplayError};
use crate::state::SessionState;

/// What a compacted journal was: counts by kind, turns, calls, usage, cost and its time span.
pub fn summarize(events: &[Event], state: &SessionState) -> Value {
    let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
    let mut cost = 0.0;
    for event in events {
        *by_kind.entry(event.kind.as_str()).or_default() += 1;
        if event.kind == "model_call_finished" {
            cost += event.payload["cost"].as_f64().unwrap_or(0.0);
        }
    }
    let count = |kind: &str| by_kind.get(kind).copied().unwrap_or(0);
    json!({
        "events": events.len(),
        "first_seq": events.first().map(|e| e.seq),
        "last_seq": events.last().map(|e| e.seq),
        "first_at": events.first().map(|e| e.created_at),
        "last_at": events.last().map(|e| e.created_at),
        "by_kind": by_kind,
        "turns": count("turn_finished") + count("turn_cancelled"),
        "user_messages": count("user_message"),
        "model_calls": count("model_call_started"),
        "tool_calls": count("tool_call_requested"),
        "approvals": count("approval_decided"),
        "usage": state.usage,
        "cost": cost,
    })
}

/// Compacts an ended session's journal: the folded state at its last seq and a summary replace
/// the events. Refused for open and parked sessions (only `closed` and `failed` ones), and a
/// no-op for a journal compacted already.
pub async fn compact(store: &dyn SessionStore, id: Uuid) -> Result<Compaction, ReplayError> {
    let session = store.get_session(id).await?;
    if !matches!(
        session.status,
        SessionStatus::Closed | SessionStatus::Failed
    ) {
        return Err(stead_persistence::Error::NotCompactable {
            session_id: id,
            status: session.status,
        }
        .into());
    }
    let previous = store.compaction(id).await?;
    if let Some(done) = &previous {
        if done.through_seq >= session.last_seq {
            return Ok(done.clone());
        }
    }
    let mut state = match &previous {
        Some(done) => state_from_document(&done.state).ok_or_else(|| {
            ReplayError::Invalid("the earlier compaction's state is of another version".into())
        })?,
        None => SessionState::default(),
    };
    let events = read_all(store, id, state.last_seq).await?;
    for event in &events {
        // Never delete what this Stead cannot fold (an event from a newer version).
        let typed = typed(event).ok_or_else(|| {
            ReplayError::Invalid(format!(
                "seq {}: this Stead cannot read the `{}` event recorded there, so it does not compact this journal",
                event.seq, event.kind
            ))
        })?;
        state.apply(event.seq, &typed);
    }
    let mut summary = summarize(&events, &state);
    if let Some(done) = previous {
        summary["earlier"] = done.summary;
    }
    Ok(store
        .compact(id, state.last_seq, snapshot_document(&state), summary)
        .await?)
}

//! The store's rows decoded from either backend's columns.

use uuid::Uuid;

use super::dialect::Columns;
use crate::request_log::{LogStatus, RequestLogEntry, StatsInput};
use crate::{Compaction, Error, Event, KvEntry, ParentLink, Result, Session, Snapshot};

/// The columns [`session`] reads.
pub(crate) const SESSION_COLUMNS: &str =
    "id, agent, status, metadata, last_seq, created_at, updated_at, closed_at, token_generation, \
     parent_session_id, parent_call_id, project_id";

/// The columns of a request-log row (in the order `request_log::log_values` binds them).
pub(crate) const LOG_COLUMNS: &str = "id, at, session_id, api_key, route, provider, model, \
     status, attempts, latency_ms, ttft_ms, tokens_in, tokens_out, cost, cache_hit, stream, \
     metadata, error, bodies, guardrails";

pub(crate) fn session(row: &impl Columns) -> Result<Session> {
    Ok(Session {
        id: row.id("id")?,
        agent: row.text("agent")?,
        status: row.text("status")?.parse()?,
        metadata: row.json("metadata")?,
        last_seq: row.int("last_seq")?,
        created_at: row.time("created_at")?,
        updated_at: row.time("updated_at")?,
        closed_at: row.opt_time("closed_at")?,
        token_generation: row.int("token_generation")?,
        parent: match row.opt_id("parent_session_id")? {
            Some(session_id) => Some(ParentLink {
                session_id,
                call_id: row.opt_text("parent_call_id")?.unwrap_or_default().into(),
            }),
            None => None,
        },
        project_id: row.id("project_id")?,
    })
}

/// A journal row: `seq, kind, payload, created_at`.
pub(crate) fn event(session_id: Uuid, row: &impl Columns) -> Result<Event> {
    Ok(Event {
        session_id,
        seq: row.int("seq")?,
        kind: row.text("kind")?,
        payload: row.json("payload")?,
        created_at: row.time("created_at")?,
    })
}

/// A snapshot row: `seq, state, created_at`.
pub(crate) fn snapshot(session_id: Uuid, row: &impl Columns) -> Result<Snapshot> {
    Ok(Snapshot {
        session_id,
        seq: row.int("seq")?,
        state: row.json("state")?,
        created_at: row.time("created_at")?,
    })
}

/// A compaction row: `through_seq, state, summary, compacted_at`.
pub(crate) fn compaction(session_id: Uuid, row: &impl Columns) -> Result<Compaction> {
    Ok(Compaction {
        session_id,
        through_seq: row.int("through_seq")?,
        state: row.json("state")?,
        summary: row.json("summary")?,
        compacted_at: row.time("compacted_at")?,
    })
}

/// A key–value row: `key, value, updated_at`.
pub(crate) fn kv_entry(row: &impl Columns) -> Result<KvEntry> {
    Ok(KvEntry {
        key: row.text("key")?,
        value: row.json("value")?,
        updated_at: row.time("updated_at")?,
    })
}

pub(crate) fn log_entry(row: &impl Columns) -> Result<RequestLogEntry> {
    Ok(RequestLogEntry {
        id: row.id("id")?,
        at: row.time("at")?,
        session_id: row.opt_id("session_id")?,
        api_key: row.opt_text("api_key")?,
        route: row.text("route")?,
        provider: row.opt_text("provider")?,
        model: row.opt_text("model")?,
        status: {
            let status = row.text("status")?;
            LogStatus::parse(&status)
                .ok_or_else(|| Error::Corrupt(format!("request log status `{status}`")))?
        },
        attempts: serde_json::from_value(row.json("attempts")?)
            .map_err(|e| Error::Corrupt(format!("request log attempts: {e}")))?,
        latency_ms: row.real("latency_ms")?,
        ttft_ms: row.opt_real("ttft_ms")?,
        tokens_in: u64::try_from(row.int("tokens_in")?).unwrap_or(0),
        tokens_out: u64::try_from(row.int("tokens_out")?).unwrap_or(0),
        cost: row.real("cost")?,
        cache_hit: row.flag("cache_hit")?,
        stream: row.flag("stream")?,
        metadata: match row.json("metadata")? {
            serde_json::Value::Object(map) => map,
            _ => serde_json::Map::new(),
        },
        error: row.opt_text("error")?,
        bodies: row.json("bodies")?,
        guardrails: serde_json::from_value(row.json("guardrails")?)
            .map_err(|e| Error::Corrupt(format!("request log guardrails: {e}")))?,
    })
}

/// A statistics row: `key, status, cache_hit, latency_ms, ttft_ms, tokens_in, tokens_out,
/// cost`.
pub(crate) fn stats_input(row: &impl Columns) -> Result<StatsInput> {
    Ok(StatsInput {
        key: row.opt_text("key")?,
        ok: row.text("status")? == "ok",
        cache_hit: row.flag("cache_hit")?,
        latency_ms: row.real("latency_ms")?,
        ttft_ms: row.opt_real("ttft_ms")?,
        tokens_in: row.int("tokens_in")?,
        tokens_out: row.int("tokens_out")?,
        cost: row.real("cost")?,
    })
}

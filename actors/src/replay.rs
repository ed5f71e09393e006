//! Replay debugging over recorded journals: the state at any seq, forks, the export format
//! (one event per line after a header), the decision check that re-drives the current agent
//! loop over a recording, and journal compaction. Nothing here calls a model or a tool: model
//! outputs and tool results always come from the record.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use stead_persistence::{
    Compaction, Event, JournalStore, NewEvent, NewSession, Session, SessionStatus,
};
use uuid::Uuid;

use crate::decide::{decide, AgentRules, Input, ModelOutput};
use crate::events::{Overrides, SessionEvent};
use crate::state::SessionState;

/// Version of the snapshot document (`{"version", "state"}`); a snapshot of another version is
/// ignored by activation (full replay).
pub const SNAPSHOT_VERSION: u64 = 1;

/// Events read per page.
const PAGE: u32 = 1000;

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

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Store(#[from] stead_persistence::Error),
    /// The journal up to `through_seq` was compacted into a snapshot and a summary.
    #[error("the journal of this session was compacted through seq {through_seq}; steps up to it are summarized, not kept")]
    Compacted { through_seq: i64 },
    #[error("seq {at} is out of range: the session's last seq is {last_seq}")]
    SeqOutOfRange { at: i64, last_seq: i64 },
    #[error("{0}")]
    Invalid(String),
}

/// One event as it is read back (unknown kinds from a newer Stead are kept untyped).
fn typed(event: &Event) -> Option<SessionEvent> {
    SessionEvent::from_parts(&event.kind, &event.payload)
}

/// Every event of a session after `after`, in order.
pub async fn read_all(
    store: &Arc<dyn JournalStore>,
    id: Uuid,
    after: i64,
) -> Result<Vec<Event>, ReplayError> {
    read_through(store, id, after, i64::MAX).await
}

/// The events of a session with `after < seq <= through`, in order.
async fn read_through(
    store: &Arc<dyn JournalStore>,
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
    store: &Arc<dyn JournalStore>,
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
    for event in read_through(store, id, folded.last_seq, at).await? {
        match typed(&event) {
            Some(typed) => folded.apply(event.seq, &typed),
            None => folded.last_seq = event.seq,
        }
    }
    Ok(folded)
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

/// A new session whose journal is a copy of `source`'s up to `at` (same seqs, kinds, payloads
/// and times) followed by `session_forked` with the overrides. Returns the new session's row
/// and last seq. The fork is not activated here: whatever was in flight at `at` carries on
/// when its actor starts.
pub async fn fork(
    store: &Arc<dyn JournalStore>,
    source: &Session,
    at: i64,
    overrides: Overrides,
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
    }
    .to_parts();
    let mut rows = new_events(&copied);
    rows.push(NewEvent::new(kind, payload));
    let row = create_with_journal(store, &source.agent, metadata, rows).await?;
    Ok((row, at + 1))
}

/// A new session holding `events` as its journal, written in one append (all or nothing); the
/// session is deleted again when the append fails, so no partial copy is left behind.
async fn create_with_journal(
    store: &Arc<dyn JournalStore>,
    agent: &str,
    metadata: Value,
    events: Vec<NewEvent>,
) -> Result<Session, ReplayError> {
    let row = store
        .create_session(NewSession {
            id: None,
            agent: agent.to_string(),
            metadata,
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
pub async fn settle_status(
    store: &Arc<dyn JournalStore>,
    id: Uuid,
) -> Result<Session, ReplayError> {
    let row = store.get_session(id).await?;
    let folded = fold_until(store, id, row.last_seq).await?;
    let status: SessionStatus = folded
        .status()
        .parse()
        .map_err(|e: stead_persistence::Error| ReplayError::Invalid(e.to_string()))?;
    Ok(match status {
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

// ---------------------------------------------------------------------------------------------
// Export and import

/// `format` of an export's header line.
pub const EXPORT_FORMAT: &str = "stead.session";
/// `version` of the export format this Stead writes and reads.
pub const EXPORT_VERSION: u32 = 1;

/// The first line of an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportHeader {
    pub format: String,
    pub version: u32,
    pub stead_version: String,
    pub session_id: Uuid,
    pub agent: String,
    /// SHA-256 of the agent's configuration when it was exported (`None`: not configured).
    pub agent_config_hash: Option<String>,
    pub metadata: Value,
    pub status: SessionStatus,
    pub last_seq: i64,
    pub exported_at: DateTime<Utc>,
}

/// Every other line of an export: one journal event, as the REST events endpoint shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedEvent {
    pub seq: i64,
    pub kind: String,
    pub payload: Value,
    pub at: DateTime<Utc>,
}

impl From<&Event> for ExportedEvent {
    fn from(event: &Event) -> Self {
        ExportedEvent {
            seq: event.seq,
            kind: event.kind.clone(),
            payload: event.payload.clone(),
            at: event.created_at,
        }
    }
}

/// A parsed, validated export.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    pub header: ExportHeader,
    pub events: Vec<ExportedEvent>,
}

/// A file that is not a valid export, with the line (1-based) where that shows.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ImportError {
    pub line: usize,
    pub message: String,
}

/// The header for exporting `session` (refused for a compacted journal: it is not complete).
pub async fn export_header(
    store: &Arc<dyn JournalStore>,
    session: &Session,
    agent_config_hash: Option<String>,
) -> Result<ExportHeader, ReplayError> {
    if let Some(compaction) = store.compaction(session.id).await? {
        return Err(ReplayError::Compacted {
            through_seq: compaction.through_seq,
        });
    }
    Ok(ExportHeader {
        format: EXPORT_FORMAT.into(),
        version: EXPORT_VERSION,
        stead_version: env!("CARGO_PKG_VERSION").into(),
        session_id: session.id,
        agent: session.agent.clone(),
        agent_config_hash,
        metadata: session.metadata.clone(),
        status: session.status,
        last_seq: session.last_seq,
        exported_at: Utc::now(),
    })
}

/// Writes a session as an export: the header line, then one line per event (read page by
/// page, so a long journal is never held whole).
pub async fn write_export(
    store: &Arc<dyn JournalStore>,
    header: &ExportHeader,
    out: &mut (dyn std::io::Write + Send),
) -> Result<usize, ReplayError> {
    let io = |e: std::io::Error| ReplayError::Invalid(format!("cannot write the export: {e}"));
    serde_json::to_writer(&mut *out, header).map_err(|e| io(e.into()))?;
    out.write_all(b"\n").map_err(io)?;
    let mut after = 0;
    let mut written = 0;
    while after < header.last_seq {
        let page = store
            .read(
                header.session_id,
                after,
                PAGE.min((header.last_seq - after) as u32),
            )
            .await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for event in &page {
            serde_json::to_writer(&mut *out, &ExportedEvent::from(event))
                .map_err(|e| io(e.into()))?;
            out.write_all(b"\n").map_err(io)?;
            written += 1;
        }
    }
    out.flush().map_err(io)?;
    if written as i64 != header.last_seq {
        return Err(ReplayError::Invalid(format!(
            "the journal changed while it was exported: {written} events written, {} expected",
            header.last_seq
        )));
    }
    Ok(written)
}

/// Reads and validates an export: a header of a known format and version, then events with
/// seqs `1, 2, …` without gaps, each of a kind this Stead knows with a well-formed payload,
/// the first one `session_created` for the header's agent, the last one at the header's
/// `last_seq`. The first problem is reported with its line number.
pub fn parse_export(reader: impl BufRead) -> Result<Export, ImportError> {
    let err = |line: usize, message: String| ImportError { line, message };
    let mut lines = reader.lines().enumerate().map(|(i, l)| (i + 1, l));
    let (_, first) = lines
        .next()
        .ok_or_else(|| err(1, "the file is empty (expected a header line)".into()))?;
    let first = first.map_err(|e| err(1, format!("cannot read: {e}")))?;
    let raw: Value =
        serde_json::from_str(&first).map_err(|e| err(1, format!("the header is not JSON: {e}")))?;
    if raw["format"] != EXPORT_FORMAT {
        return Err(err(
            1,
            format!("not a Stead session export (the header's `format` must be `{EXPORT_FORMAT}`)"),
        ));
    }
    if raw["version"] != EXPORT_VERSION {
        return Err(err(
            1,
            format!(
                "export format version {} is not supported (this Stead reads version {EXPORT_VERSION})",
                raw["version"]
            ),
        ));
    }
    let header: ExportHeader =
        serde_json::from_value(raw).map_err(|e| err(1, format!("malformed header: {e}")))?;
    let mut events: Vec<ExportedEvent> = Vec::new();
    let mut last_line = 1;
    for (number, line) in lines {
        last_line = number;
        let line = line.map_err(|e| err(number, format!("cannot read: {e}")))?;
        if line.trim().is_empty() {
            return Err(err(
                number,
                "empty line (expected one event per line)".into(),
            ));
        }
        let event: ExportedEvent = serde_json::from_str(&line)
            .map_err(|e| err(number, format!("malformed event: {e}")))?;
        let expected = events.last().map_or(1, |e| e.seq + 1);
        if event.seq != expected {
            return Err(err(
                number,
                if event.seq > expected {
                    format!(
                        "gap in the journal: seq {} follows seq {} (expected {expected})",
                        event.seq,
                        expected - 1
                    )
                } else {
                    format!("seq {} is out of order (expected {expected})", event.seq)
                },
            ));
        }
        if let Err(e) = serde_json::from_value::<SessionEvent>(
            json!({ "kind": event.kind, "payload": event.payload }),
        ) {
            return Err(err(
                number,
                format!(
                    "event `{}` at seq {} is not valid: {e}",
                    event.kind, event.seq
                ),
            ));
        }
        if event.seq == 1 && event.kind != "session_created" {
            return Err(err(
                number,
                format!(
                    "the journal must start with `session_created`, not `{}`",
                    event.kind
                ),
            ));
        }
        if event.seq == 1 && event.payload["agent"] != header.agent.as_str() {
            return Err(err(
                number,
                format!(
                    "`session_created` names agent {} but the header names `{}`",
                    event.payload["agent"], header.agent
                ),
            ));
        }
        events.push(event);
    }
    let last = events.last().map_or(0, |e| e.seq);
    if last != header.last_seq {
        return Err(err(
            last_line,
            format!(
                "the file ends at seq {last} but its header says the journal ends at seq {} (truncated?)",
                header.last_seq
            ),
        ));
    }
    Ok(Export { header, events })
}

/// The metadata key where an imported session records where its journal came from: a list of
/// `{session_id, through_seq}`, one per import, oldest first. The events up to `through_seq`
/// were decided as that session (its id is in their idempotency keys), which `check` needs.
pub const IMPORTED_FROM: &str = "imported_from";

/// Creates a new session (a fresh id) holding an export's journal, with its original times and
/// metadata (plus its provenance under [`IMPORTED_FROM`]), and the status its journal folds
/// to.
pub async fn import(
    store: &Arc<dyn JournalStore>,
    export: &Export,
) -> Result<Session, ReplayError> {
    let mut metadata = export.header.metadata.clone();
    if let Some(object) = metadata.as_object_mut() {
        let mut imports = match object.remove(IMPORTED_FROM) {
            Some(Value::Array(list)) => list,
            _ => Vec::new(),
        };
        imports.push(json!({
            "session_id": export.header.session_id,
            "through_seq": export.header.last_seq,
        }));
        object.insert(IMPORTED_FROM.into(), Value::Array(imports));
    }
    let rows = export
        .events
        .iter()
        .map(|e| NewEvent {
            kind: e.kind.clone(),
            payload: e.payload.clone(),
            created_at: e.at,
        })
        .collect();
    let row = create_with_journal(store, &export.header.agent, metadata, rows).await?;
    settle_status(store, row.id).await
}

// ---------------------------------------------------------------------------------------------
// The decision check

/// Where the current code decides differently from the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Divergence {
    pub seq: i64,
    /// The recorded event at `seq` (`{kind, payload}`), or `None` past the journal's end.
    pub recorded: Option<Value>,
    /// What the current code decides at `seq`, or `None` when it takes no step there.
    pub decided: Option<Value>,
    pub explanation: String,
}

/// The outcome of checking one recorded journal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckReport {
    pub events: usize,
    /// Inputs re-decided (user messages, model outputs, tool results, decisions, …).
    pub decisions: usize,
    /// The first divergence, if any.
    pub divergence: Option<Divergence>,
}

fn parts(event: &SessionEvent) -> Value {
    let (kind, payload) = event.to_parts();
    json!({ "kind": kind, "payload": payload })
}

/// What happened from outside at a decision boundary, read from the recorded event there.
/// `None`: a structural event folded as is (`session_created`, `session_forked`).
fn recorded_input(event: &SessionEvent) -> Option<Input> {
    Some(match event.clone() {
        SessionEvent::SessionCreated { .. } | SessionEvent::SessionForked { .. } => return None,
        SessionEvent::UserMessage { text, client_id } => Input::UserMessage { text, client_id },
        SessionEvent::ModelCallFinished {
            call_id,
            text,
            tool_calls,
            usage,
            provider,
            model,
            latency_ms,
            ttft_ms,
            cost,
        } => Input::ModelFinished {
            call_id,
            output: ModelOutput {
                text,
                tool_calls: tool_calls
                    .into_iter()
                    .map(|c| (c.tool, c.arguments))
                    .collect(),
                usage,
                provider,
                model,
                latency_ms,
                ttft_ms,
                cost,
            },
        },
        SessionEvent::ModelCallFailed { call_id, error } => Input::ModelFailed { call_id, error },
        SessionEvent::ToolCallFinished {
            call_id, result, ..
        } => Input::ToolFinished { call_id, result },
        // An in-doubt failure is what recovery decides after a restart.
        SessionEvent::ToolCallFailed { in_doubt: true, .. } => Input::Recover,
        SessionEvent::ToolCallFailed { call_id, error, .. } => Input::ToolFailed { call_id, error },
        SessionEvent::ApprovalDecided {
            call_id,
            approved: false,
            reason: Some(reason),
            decided_by,
            ..
        } if decided_by == "stead" && reason == "expired" => Input::ApprovalExpired { call_id },
        SessionEvent::ApprovalDecided {
            call_id,
            approved,
            reason,
            decided_by,
            scope,
        } => Input::Decision {
            call_id,
            approved,
            reason,
            decided_by,
            scope,
            args_hash: None,
        },
        SessionEvent::TurnCancelled { reason } => Input::Cancel { reason },
        SessionEvent::SessionFailed { reason } => Input::Fail { reason },
        SessionEvent::SessionClosed { reason } => Input::Close { reason },
        // Anything else at a boundary was decided without new input: an activation.
        _ => Input::Recover,
    })
}

/// A recorded event this Stead cannot read (a kind from a newer version, or a damaged payload):
/// the journal cannot be checked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("seq {seq}: this Stead cannot read the `{kind}` event recorded there")]
pub struct Unreadable {
    pub seq: i64,
    pub kind: String,
}

/// Which session decided each seq of a journal: a fork's copied events were decided as its
/// source (up to the `session_forked` marker), an import's as the exported session (up to the
/// seq its metadata records), later ones as the session itself. Session ids matter because
/// they are part of every tool call's idempotency key.
struct Deciders {
    /// `(through_seq, session id)`, ascending by seq.
    bounds: Vec<(i64, String)>,
    own: String,
}

impl Deciders {
    fn new(own: Uuid, metadata: &Value, events: &[(i64, SessionEvent)]) -> Self {
        let mut bounds: Vec<(i64, String)> = metadata[IMPORTED_FROM]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                Some((
                    entry["through_seq"].as_i64()?,
                    entry["session_id"].as_str()?.to_string(),
                ))
            })
            .collect();
        for (seq, event) in events {
            if let SessionEvent::SessionForked { from, .. } = event {
                bounds.push((seq - 1, from.clone()));
            }
        }
        bounds.sort_by_key(|(seq, _)| *seq);
        Deciders {
            bounds,
            own: own.to_string(),
        }
    }

    fn at(&self, seq: i64) -> &str {
        self.bounds
            .iter()
            .find(|(through, _)| seq <= *through)
            .map_or(self.own.as_str(), |(_, id)| id.as_str())
    }
}

/// Re-drives the agent loop's decisions (`decide` with `rules`) over a recorded journal. At
/// each decision boundary the recorded event says what came from outside (a user message, a
/// model output, a tool result, a decision); the current code decides the events that follow,
/// and they must equal the recorded ones by value. Nothing is called. The state always
/// advances by the recorded events, so a report names the first divergence only.
pub fn check(
    session_id: Uuid,
    metadata: &Value,
    events: &[Event],
    rules: &AgentRules,
) -> Result<CheckReport, Unreadable> {
    let mut report = CheckReport {
        events: events.len(),
        decisions: 0,
        divergence: None,
    };
    let mut typed_events = Vec::with_capacity(events.len());
    for event in events {
        match typed(event) {
            Some(typed) => typed_events.push((event.seq, typed)),
            None => {
                return Err(Unreadable {
                    seq: event.seq,
                    kind: event.kind.clone(),
                })
            }
        }
    }
    let deciders = Deciders::new(session_id, metadata, &typed_events);
    let mut state = SessionState::default();
    let mut i = 0;
    while i < typed_events.len() {
        let (seq, event) = &typed_events[i];
        let Some(input) = recorded_input(event) else {
            state.apply(*seq, event);
            i += 1;
            continue;
        };
        // A step taken without new input is an activation, which only a fork's first
        // activation takes (finishing the decision its copy cut); anywhere else it means the
        // current code stopped before this recorded step.
        let after_fork =
            i > 0 && matches!(typed_events[i - 1].1, SessionEvent::SessionForked { .. });
        if matches!(input, Input::Recover)
            && !after_fork
            && !matches!(event, SessionEvent::ToolCallFailed { in_doubt: true, .. })
        {
            report.divergence = Some(Divergence {
                seq: *seq,
                recorded: Some(parts(event)),
                decided: None,
                explanation: "the current code stops before this step (it waits for input here)"
                    .into(),
            });
            return Ok(report);
        }
        report.decisions += 1;
        let decided = match decide(&state, deciders.at(*seq), input, rules) {
            Ok(decision) => decision.events,
            Err(refusal) => {
                report.divergence = Some(Divergence {
                    seq: *seq,
                    recorded: Some(parts(event)),
                    decided: None,
                    explanation: format!("the current code refuses this input ({refusal:?})"),
                });
                return Ok(report);
            }
        };
        if decided.is_empty() {
            report.divergence = Some(Divergence {
                seq: *seq,
                recorded: Some(parts(event)),
                decided: None,
                explanation: "the current code takes no step here".into(),
            });
            return Ok(report);
        }
        let mut consumed = 0;
        for (k, ours) in decided.iter().enumerate() {
            match typed_events.get(i + k) {
                None => {
                    report.divergence = Some(Divergence {
                        seq: state.last_seq + 1 + k as i64,
                        recorded: None,
                        decided: Some(parts(ours)),
                        explanation: "the journal ends here; the current code decides more".into(),
                    });
                    return Ok(report);
                }
                // A fork's copy may end inside a decision.
                Some((_, SessionEvent::SessionForked { .. })) if k > 0 => break,
                Some((rseq, recorded)) if recorded != ours => {
                    report.divergence = Some(Divergence {
                        seq: *rseq,
                        recorded: Some(parts(recorded)),
                        decided: Some(parts(ours)),
                        explanation: "the current code decides another step".into(),
                    });
                    return Ok(report);
                }
                Some(_) => consumed += 1,
            }
        }
        for (seq, event) in &typed_events[i..i + consumed] {
            state.apply(*seq, event);
        }
        i += consumed;
    }
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// Compaction

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
pub async fn compact(store: &Arc<dyn JournalStore>, id: Uuid) -> Result<Compaction, ReplayError> {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::decide::ToolRules;
    use crate::events::{ApprovalScope, Usage};
    use crate::policy::ApprovalPolicy;
    use crate::state::CallStatus;

    fn rules(gated: ApprovalPolicy) -> AgentRules {
        let mut tools = BTreeMap::new();
        tools.insert(
            "drop".to_string(),
            ToolRules {
                approval: gated,
                idempotent: false,
            },
        );
        tools.insert(
            "look".to_string(),
            ToolRules {
                approval: ApprovalPolicy::Never,
                idempotent: true,
            },
        );
        AgentRules {
            route: "default".into(),
            max_steps: 3,
            tools,
            approval_timeout: None,
        }
    }

    /// Records a journal as the session actor would: each input decided, its events applied.
    struct Recorder {
        id: Uuid,
        rules: AgentRules,
        state: SessionState,
        events: Vec<Event>,
        /// Inputs that journaled something.
        inputs: usize,
    }

    impl Recorder {
        fn new(rules: AgentRules) -> Self {
            let mut recorder = Recorder {
                id: Uuid::now_v7(),
                rules,
                state: SessionState::default(),
                events: Vec::new(),
                inputs: 0,
            };
            recorder.push(SessionEvent::SessionCreated { agent: "a".into() });
            recorder
        }

        fn push(&mut self, event: SessionEvent) {
            let seq = self.state.last_seq + 1;
            self.state.apply(seq, &event);
            let (kind, payload) = event.to_parts();
            self.events.push(Event {
                session_id: self.id,
                seq,
                kind,
                payload,
                created_at: Utc::now(),
            });
        }

        fn input(&mut self, input: Input) {
            let decision = decide(&self.state, &self.id.to_string(), input, &self.rules)
                .expect("a valid input");
            self.inputs += usize::from(!decision.events.is_empty());
            for event in decision.events {
                self.push(event);
            }
        }

        fn model(&self) -> String {
            self.state
                .turn
                .as_ref()
                .unwrap()
                .model_call
                .clone()
                .unwrap()
        }

        fn call(&self, pick: fn(&CallStatus) -> bool) -> String {
            let turn = self.state.turn.as_ref().unwrap();
            turn.calls
                .iter()
                .find(|c| pick(&c.status))
                .unwrap()
                .call_id
                .clone()
        }

        fn answer(&mut self, text: &str, tools: Vec<(&str, Value)>) {
            let call_id = self.model();
            self.input(Input::ModelFinished {
                call_id,
                output: ModelOutput {
                    text: text.into(),
                    tool_calls: tools.into_iter().map(|(t, a)| (t.to_string(), a)).collect(),
                    usage: Usage {
                        prompt_tokens: 10,
                        completion_tokens: 2,
                    },
                    provider: "p".into(),
                    model: "m".into(),
                    latency_ms: 12.5,
                    ttft_ms: 3.0,
                    cost: 0.001,
                },
            });
        }

        fn say(&mut self, text: &str) {
            self.input(Input::UserMessage {
                text: text.into(),
                client_id: None,
            });
        }
    }

    /// Every path of the loop: rejection, expiry, cancel, a failed model call, a restart with a
    /// non-idempotent tool in flight (in doubt), a queued message, max_steps, closing.
    fn eventful(rules: AgentRules) -> Recorder {
        let mut r = Recorder::new(rules);
        r.say("drop t1");
        r.answer("", vec![("drop", json!({ "table": "t1" }))]);
        let parked = r.call(|s| matches!(s, CallStatus::AwaitingApproval { .. }));
        r.input(Input::Decision {
            call_id: parked,
            approved: false,
            reason: Some("no".into()),
            decided_by: "ada".into(),
            scope: ApprovalScope::Once,
            args_hash: None,
        });
        r.answer("ok, kept it", vec![]);
        r.say("drop t2");
        r.answer("", vec![("drop", json!({ "table": "t2" }))]);
        let parked = r.call(|s| matches!(s, CallStatus::AwaitingApproval { .. }));
        r.input(Input::ApprovalExpired { call_id: parked });
        r.say("queued while running");
        r.answer("gave up", vec![]);
        r.answer("and the queued one", vec![]);
        r.say("look and cancel");
        r.answer("", vec![("look", json!({}))]);
        r.input(Input::Cancel {
            reason: "user".into(),
        });
        r.say("fail please");
        let call_id = r.model();
        r.input(Input::ModelFailed {
            call_id,
            error: "503".into(),
        });
        r.say("drop t3");
        r.answer("", vec![("drop", json!({ "table": "t3" }))]);
        let parked = r.call(|s| matches!(s, CallStatus::AwaitingApproval { .. }));
        r.input(Input::Decision {
            call_id: parked,
            approved: true,
            reason: None,
            decided_by: "ada".into(),
            scope: ApprovalScope::Session,
            args_hash: None,
        });
        r.input(Input::Recover); // the process restarted while `drop` ran: in doubt
        r.say("loop");
        for _ in 0..3 {
            r.answer("", vec![("look", json!({}))]);
            let started = r.call(|s| matches!(s, CallStatus::Started { .. }));
            r.input(Input::ToolFinished {
                call_id: started,
                result: json!({ "seen": true }),
            });
        }
        r.input(Input::Close {
            reason: "done".into(),
        });
        r
    }

    #[test]
    fn an_unchanged_loop_passes_every_path() {
        let r = eventful(rules(ApprovalPolicy::Always));
        let kinds: Vec<&str> = r.events.iter().map(|e| e.kind.as_str()).collect();
        for kind in [
            "turn_cancelled",
            "model_call_failed",
            "session_closed",
            "approval_decided",
        ] {
            assert!(kinds.contains(&kind), "{kind} recorded");
        }
        assert!(r
            .events
            .iter()
            .any(|e| e.payload["in_doubt"] == true && e.kind == "tool_call_failed"));
        assert!(r
            .events
            .iter()
            .any(|e| e.kind == "turn_finished" && e.payload["reason"] == "max_steps"));
        let report = check(r.id, &json!({}), &r.events, &r.rules).unwrap();
        assert_eq!(report.divergence, None);
        assert_eq!(report.decisions, r.inputs, "every input was re-decided");
    }

    #[test]
    fn a_changed_rule_diverges_at_the_first_step_it_changes() {
        let r = eventful(rules(ApprovalPolicy::Always));
        let first_park = r
            .events
            .iter()
            .find(|e| e.kind == "approval_requested")
            .unwrap()
            .seq;
        let report = check(r.id, &json!({}), &r.events, &rules(ApprovalPolicy::Never)).unwrap();
        let divergence = report.divergence.unwrap();
        assert_eq!(divergence.seq, first_park);
        assert_eq!(divergence.recorded.unwrap()["kind"], "approval_requested");
        assert_eq!(divergence.decided.unwrap()["kind"], "tool_call_started");

        // Fewer steps allowed: the max_steps turn ends one model call earlier.
        let mut fewer = rules(ApprovalPolicy::Always);
        fewer.max_steps = 2;
        let divergence = check(r.id, &json!({}), &r.events, &fewer)
            .unwrap()
            .divergence
            .unwrap();
        assert_eq!(
            divergence.decided.unwrap()["payload"]["reason"],
            "max_steps"
        );
    }

    #[test]
    fn another_session_id_changes_idempotency_keys_unless_provenance_says_so() {
        let r = eventful(rules(ApprovalPolicy::Always));
        let other = Uuid::now_v7();
        let divergence = check(other, &json!({}), &r.events, &r.rules)
            .unwrap()
            .divergence;
        assert_eq!(
            divergence.unwrap().recorded.unwrap()["kind"],
            "tool_call_started"
        );
        let imported =
            json!({ IMPORTED_FROM: [{ "session_id": r.id, "through_seq": r.events.len() }] });
        assert_eq!(
            check(other, &imported, &r.events, &r.rules)
                .unwrap()
                .divergence,
            None
        );
    }

    /// Two turns that each run the (approval-free) `look` tool.
    fn looks(r: &mut Recorder, turns: usize) {
        for _ in 0..turns {
            r.say("look");
            r.answer("", vec![("look", json!({}))]);
            let started = r.call(|s| matches!(s, CallStatus::Started { .. }));
            r.input(Input::ToolFinished {
                call_id: started,
                result: json!({ "seen": true }),
            });
            r.answer("seen", vec![]);
        }
    }

    #[test]
    fn a_fork_of_an_import_attributes_each_part_to_its_decider() {
        // A records two turns; B imports all of it; C forks B after the first turn and
        // runs a turn of its own.
        let mut a = Recorder::new(rules(ApprovalPolicy::Always));
        looks(&mut a, 2);
        let b = Uuid::now_v7();
        let at = a
            .events
            .iter()
            .find(|e| e.kind == "turn_finished")
            .unwrap()
            .seq;
        let mut c = Recorder::new(a.rules.clone());
        c.id = Uuid::now_v7();
        c.events.clear();
        c.state = SessionState::default();
        for event in &a.events[..at as usize] {
            let typed = SessionEvent::from_parts(&event.kind, &event.payload).unwrap();
            c.push(typed);
        }
        c.push(SessionEvent::SessionForked {
            from: b.to_string(),
            at,
            overrides: Overrides::default(),
        });
        looks(&mut c, 1);
        let clipped = json!({ IMPORTED_FROM: [{ "session_id": a.id, "through_seq": at }] });
        let report = check(c.id, &clipped, &c.events, &c.rules).unwrap();
        assert_eq!(report.divergence, None);
        // Unclipped, the import would claim C's own steps for A.
        let unclipped =
            json!({ IMPORTED_FROM: [{ "session_id": a.id, "through_seq": a.events.len() }] });
        let report = check(c.id, &unclipped, &c.events, &c.rules).unwrap();
        assert!(report.divergence.is_some());
    }

    #[test]
    fn a_step_taken_without_input_outside_a_fork_is_a_divergence() {
        let mut r = Recorder::new(rules(ApprovalPolicy::Always));
        looks(&mut r, 1);
        // A recorded step at a decision boundary that no input explains (here moved ahead of
        // the tool result that caused it): the current code would wait for input there.
        let finished = r
            .events
            .iter()
            .position(|e| e.kind == "tool_call_finished")
            .unwrap();
        let mut cut = r.events.clone();
        let started = cut.remove(finished + 1);
        cut.insert(finished, started);
        for (i, event) in cut.iter_mut().enumerate() {
            event.seq = i as i64 + 1;
        }
        let report = check(r.id, &json!({}), &cut, &r.rules).unwrap();
        assert!(report.divergence.is_some(), "{report:?}");
        let unreadable = {
            let mut events = r.events.clone();
            events[2].kind = "from_the_future".into();
            check(r.id, &json!({}), &events, &r.rules).unwrap_err()
        };
        assert_eq!(unreadable.seq, 3);
    }

    #[test]
    fn exports_parse_and_problems_name_their_line() {
        let header = json!({
            "format": EXPORT_FORMAT, "version": EXPORT_VERSION, "stead_version": "0",
            "session_id": Uuid::now_v7(), "agent": "a", "agent_config_hash": null,
            "metadata": {}, "status": "idle", "last_seq": 2, "exported_at": "2026-11-30T00:00:00Z"
        });
        let line = |seq: i64, kind: &str, payload: Value| {
            json!({ "seq": seq, "kind": kind, "payload": payload, "at": "2026-11-30T00:00:01Z" })
                .to_string()
        };
        let created = line(1, "session_created", json!({ "agent": "a" }));
        let message = line(
            2,
            "user_message",
            json!({ "text": "hi", "client_id": null }),
        );
        let file = |lines: &[&str]| lines.join("\n");
        let parsed =
            parse_export(file(&[&header.to_string(), &created, &message]).as_bytes()).unwrap();
        assert_eq!(parsed.events.len(), 2);
        assert_eq!(parsed.events[1].payload["text"], "hi");
        let wrong_agent = line(1, "session_created", json!({ "agent": "b" }));
        let newer = {
            let mut h = header.clone();
            h["version"] = json!(EXPORT_VERSION + 1);
            h.to_string()
        };
        let cases = [
            (
                file(&[
                    &header.to_string(),
                    &line(1, "user_message", json!({ "text": "x", "client_id": null })),
                ]),
                2,
                "must start with",
            ),
            (
                file(&[&header.to_string(), &wrong_agent, &message]),
                2,
                "names agent",
            ),
            (file(&[&newer, &created, &message]), 1, "not supported"),
            (
                file(&[&header.to_string(), &created, &created]),
                3,
                "out of order",
            ),
            (file(&[&header.to_string(), &created]), 2, "truncated"),
        ];
        for (text, line, words) in cases {
            let error = parse_export(text.as_bytes()).unwrap_err();
            assert_eq!(error.line, line, "{error}");
            assert!(error.message.contains(words), "{error}");
        }
    }
}

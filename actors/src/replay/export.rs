//! The export format (a header line, one event per line, then one line per artifact the
//! session's messages carry), writing it, its strict parser, and importing a parsed export as a
//! new session. The artifacts' bytes are the CLI's to read and store (`stead-artifacts`); here
//! they are base64 text.

use std::io::BufRead;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use stead_persistence::{Event, NewEvent, Session, SessionStatus, SessionStore};
use uuid::Uuid;

use super::fold::PAGE;
use super::fork::create_with_journal;
use super::{settle_status, ReplayError};
use crate::events::SessionEvent;

/// `format` of an export's header line.
pub const EXPORT_FORMAT: &str = "stead.session";
/// `version` of the export format this Stead writes; it reads this one and version 1 (the
/// same without artifact lines).
pub const EXPORT_VERSION: u32 = 2;

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

/// A line after the events: one artifact of the session, bytes included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedArtifact {
    pub artifact: ArtifactRecord,
}

/// An artifact as an export carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactRecord {
    pub id: Uuid,
    pub sha256: String,
    pub content_type: String,
    pub size: i64,
    pub created_at: DateTime<Utc>,
    /// The bytes, base64 (standard alphabet, padded).
    pub data: String,
}

/// A parsed, validated export.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    pub header: ExportHeader,
    pub events: Vec<ExportedEvent>,
    /// The artifacts its messages carry (none in a version 1 export).
    pub artifacts: Vec<ArtifactRecord>,
}

impl Export {
    /// Gives the artifacts new ids (from `new_id`) and makes the events name them (messages'
    /// attachments, tools' results): an import is a new session, and an artifact row belongs
    /// to one session.
    pub fn renumber_artifacts(&mut self, mut new_id: impl FnMut() -> Uuid) {
        let ids: std::collections::HashMap<Uuid, Uuid> = self
            .artifacts
            .iter_mut()
            .map(|a| {
                let old = a.id;
                a.id = new_id();
                (old, a.id)
            })
            .collect();
        for event in &mut self.events {
            rename_artifacts(&mut event.payload, &ids);
        }
    }
}

/// Every `artifact_id` in `value` (at any depth) that `ids` renames.
fn rename_artifacts(value: &mut Value, ids: &std::collections::HashMap<Uuid, Uuid>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                let old = inner.as_str().and_then(|s| s.parse::<Uuid>().ok());
                match old.and_then(|old| ids.get(&old)) {
                    Some(new) if key == "artifact_id" => *inner = json!(new),
                    _ => rename_artifacts(inner, ids),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| rename_artifacts(i, ids)),
        _ => {}
    }
}

/// Writes one artifact line of an export (after its events).
pub fn write_artifact(
    out: &mut (dyn std::io::Write + Send),
    artifact: ArtifactRecord,
) -> Result<(), ReplayError> {
    let io = |e: std::io::Error| ReplayError::Invalid(format!("cannot write the export: {e}"));
    serde_json::to_writer(&mut *out, &ExportedArtifact { artifact }).map_err(|e| io(e.into()))?;
    out.write_all(b"\n").map_err(io)
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
    store: &dyn SessionStore,
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
    store: &dyn SessionStore,
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
    if !(raw["version"] == 1 || raw["version"] == EXPORT_VERSION) {
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
    let mut artifacts: Vec<ArtifactRecord> = Vec::new();
    let mut last_line = 1;
    for (number, line) in lines {
        let line = line.map_err(|e| err(number, format!("cannot read: {e}")))?;
        if line.trim().is_empty() {
            return Err(err(
                number,
                "empty line (expected one event per line)".into(),
            ));
        }
        let head = line.trim_start().trim_start_matches('{').trim_start();
        if head.starts_with("\"artifact\"") {
            let line: ExportedArtifact = serde_json::from_str(&line)
                .map_err(|e| err(number, format!("malformed artifact: {e}")))?;
            artifacts.push(line.artifact);
            continue;
        }
        last_line = number;
        if !artifacts.is_empty() {
            return Err(err(
                number,
                "an event after the artifacts (they come last)".into(),
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
    Ok(Export {
        header,
        events,
        artifacts,
    })
}

/// The metadata key where an imported session records where its journal came from: a list of
/// `{session_id, through_seq}`, one per import, oldest first. The events up to `through_seq`
/// were decided as that session (its id is in their idempotency keys), which `check` needs.
pub const IMPORTED_FROM: &str = "imported_from";

/// Creates a new session (a fresh id) holding an export's journal, with its original times and
/// metadata (plus its provenance under [`IMPORTED_FROM`]), and the status its journal folds
/// to.
pub async fn import(store: &dyn SessionStore, export: &Export) -> Result<Session, ReplayError> {
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
    // An import is an installation's act: the copy joins the default project.
    let row = create_with_journal(
        store,
        stead_persistence::DEFAULT_PROJECT,
        &export.header.agent,
        metadata,
        rows,
    )
    .await?;
    settle_status(store, row.id).await
}

#[cfg(test)]
mod tests {
    use super::*;

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

        // Artifact lines come after the events; an import renumbers them and the messages.
        let old = Uuid::now_v7();
        let attached = line(
            2,
            "user_message",
            json!({ "text": "see", "client_id": null, "attachments": [{
                "artifact_id": old, "content_type": "image/png", "size": 3, "sha256": "ab" }] }),
        );
        let artifact =
            json!({ "artifact": { "id": old, "sha256": "ab", "content_type": "image/png",
            "size": 3, "created_at": "2026-11-30T00:00:01Z", "data": "AAAA" } })
            .to_string();
        let mut parsed =
            parse_export(file(&[&header.to_string(), &created, &attached, &artifact]).as_bytes())
                .unwrap();
        assert_eq!(parsed.artifacts.len(), 1);
        let new = Uuid::now_v7();
        parsed.renumber_artifacts(|| new);
        assert_eq!(parsed.artifacts[0].id, new);
        assert_eq!(
            parsed.events[1].payload["attachments"][0]["artifact_id"],
            json!(new)
        );
        // A tool's result names its files the same way, deeper in.
        let mut finished = json!({ "call_id": "c1", "result": { "content": [
            { "type": "image", "artifact_id": old }, { "artifact_id": "not-an-id" } ] } });
        rename_artifacts(&mut finished, &[(old, new)].into_iter().collect());
        assert_eq!(
            finished,
            json!({ "call_id": "c1", "result": { "content": [
                { "type": "image", "artifact_id": new }, { "artifact_id": "not-an-id" } ] } })
        );
        let late =
            parse_export(file(&[&header.to_string(), &created, &artifact, &attached]).as_bytes())
                .unwrap_err();
        assert_eq!(late.line, 4, "{late}");
        assert!(late.message.contains("after the artifacts"), "{late}");
        let mut v1 = header.clone();
        v1["version"] = json!(1);
        assert!(parse_export(file(&[&v1.to_string(), &created, &message]).as_bytes()).is_ok());
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use stead_testkit::arbitrary;

    use super::parse_export;

    proptest! {
        /// Any bytes, and files of header- and event-shaped lines with values of any kind:
        /// read, or refused with a line number and a message — never a panic.
        #[test]
        fn any_export_file_reads_or_names_its_bad_line(
            bytes in prop::collection::vec(any::<u8>(), 0..400),
            header in arbitrary::object_with(&[
                "format", "version", "session_id", "agent", "last_seq", "metadata", "exported_at",
                "agent_config_hash",
            ]),
            events in prop::collection::vec(
                arbitrary::object_with(&["seq", "kind", "payload", "at", "created_at"]),
                0..6,
            ),
        ) {
            let mut file = header.to_string();
            for event in &events {
                file.push('\n');
                file.push_str(&event.to_string());
            }
            for input in [bytes, file.into_bytes()] {
                if let Err(error) = parse_export(std::io::Cursor::new(input)) {
                    prop_assert!(error.line >= 1);
                    prop_assert!(!error.message.is_empty());
                }
            }
        }
    }
}

//! The HTTP edge's wire types as Rust types — WebSocket frames both ways, the journal event as
//! REST and WebSocket carry it, session and request-log rows — and their TypeScript
//! declarations. `clients/typescript/client/src/generated/wire.ts` is generated from these (with the journal's
//! event kinds from `stead-actors` and the statuses from `stead-persistence`); a test fails when
//! the committed file drifts from them. To regenerate:
//! `STEAD_WRITE_WIRE_TYPES=1 cargo test -p stead-http wire_types`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stead_actors::{
    ApprovalScope, MessageMode, Overrides, RequestedCall, SeenTool, SessionEvent, TurnEnd, Usage,
};
use stead_persistence::request_log::RequestLogEntry;
use stead_persistence::{Event, Session, SessionStatus};
use ts_rs::TS;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::ErrorCode;
use stead_model::CallId;

/// One journaled step, as `GET …/events` and the WebSocket `event` frame carry it.
#[derive(Debug, Clone, PartialEq, Serialize, TS, ToSchema)]
pub struct EventView {
    pub seq: i64,
    pub kind: String,
    #[ts(type = "unknown")]
    #[schema(value_type = Object)]
    pub payload: Value,
    /// RFC 3339 with microseconds, UTC.
    pub at: String,
}

impl EventView {
    pub fn of(event: &Event) -> Self {
        EventView {
            seq: event.seq,
            kind: event.kind.clone(),
            payload: event.payload.clone(),
            at: rfc3339(event.created_at),
        }
    }

    /// A committed event as the journal will read it back.
    pub fn committed(seq: i64, event: &SessionEvent, at: DateTime<Utc>) -> Self {
        let (kind, payload) = event.to_parts();
        EventView {
            seq,
            kind,
            payload,
            at: rfc3339(at),
        }
    }
}

pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A WebSocket frame from the server.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// First frame of every connection.
    Hello {
        #[ts(type = "string")]
        session_id: Uuid,
        last_seq: i64,
        status: SessionStatus,
    },
    /// A journaled step.
    Event(EventView),
    /// Streamed model text (not journaled): `text` continues the call's text at `offset`. A
    /// higher `attempt` for the same call is a new run of it (re-issued after a restart): its
    /// text replaces what the client has.
    Delta {
        call_id: CallId,
        attempt: i64,
        text: String,
        offset: usize,
    },
    /// A running tool's latest progress (not journaled; MCP `notifications/progress`): a
    /// client that attaches or resumes is sent the latest of each call that runs. `progress`
    /// rises; `total`, when known, is its end.
    ToolProgress {
        call_id: CallId,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        progress: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        total: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        message: Option<String>,
        /// An `agent` call's child session.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        child_session_id: Option<String>,
        /// The child session's status.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        child_status: Option<String>,
        /// What the child did last, in a line.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        text: Option<String>,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
}

impl ServerFrame {
    /// The `tool_progress` frame of a call.
    pub fn tool_progress(call_id: &str, progress: &stead_actors::tools::ToolProgress) -> Self {
        ServerFrame::ToolProgress {
            call_id: call_id.into(),
            progress: progress.progress,
            total: progress.total,
            message: progress.message.clone(),
            child_session_id: progress.child_session_id.clone(),
            child_status: progress.child_status.clone(),
            text: progress.text.clone(),
        }
    }
}

/// An artifact a message attaches, by id (an upload's `id`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, TS, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AttachmentRef {
    #[ts(type = "string")]
    pub artifact_id: uuid::Uuid,
}

/// A WebSocket frame from a client.
#[derive(Debug, Clone, PartialEq, Deserialize, TS)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientFrame {
    UserMessage {
        text: String,
        /// Echoed back; a repeated one is not applied twice.
        #[serde(default)]
        #[ts(optional)]
        client_id: Option<String>,
        /// While a turn runs: `queue`, `interrupt`, `steer` or `drop_if_busy` (default: the
        /// agent's `message_mode`).
        #[serde(default)]
        #[ts(optional)]
        mode: Option<MessageMode>,
        /// Artifacts of the session it carries (docs/artifacts.md, "Attachments").
        #[serde(default)]
        #[ts(optional, as = "Option<Vec<AttachmentRef>>")]
        attachments: Vec<AttachmentRef>,
    },
    Approval {
        call_id: CallId,
        approved: bool,
        #[serde(default)]
        #[ts(optional)]
        reason: Option<String>,
        #[serde(default)]
        #[ts(optional)]
        scope: Option<ApprovalScope>,
        /// The arguments the decision was made on (refused when they changed).
        #[serde(default)]
        #[ts(optional)]
        args_hash: Option<String>,
        /// On a budget approval: the overspend allowed, in USD (default: the shortfall).
        #[serde(default)]
        #[ts(optional)]
        overspend_usd: Option<f64>,
    },
    Cancel {},
    /// Every journal event after `after_seq`, then the in-flight stream, then live frames.
    Resume {
        after_seq: i64,
    },
}

/// The `type`s a client frame may have.
pub const CLIENT_FRAME_TYPES: [&str; 4] = ["user_message", "approval", "cancel", "resume"];

/// A session as `GET /v1/sessions` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, TS, ToSchema)]
pub struct SessionRow {
    #[ts(type = "string")]
    pub id: Uuid,
    pub agent: String,
    /// `idle`, `running`, `awaiting_approval`, `failed` or `closed`.
    #[schema(value_type = String)]
    pub status: SessionStatus,
    #[ts(type = "Record<string, unknown>")]
    #[schema(value_type = Object)]
    pub metadata: Value,
    pub last_seq: i64,
    #[ts(type = "string")]
    pub created_at: DateTime<Utc>,
    #[ts(type = "string")]
    pub updated_at: DateTime<Utc>,
    #[ts(type = "string | null")]
    pub closed_at: Option<DateTime<Utc>>,
    /// A child session's parent (sub-agents); absent on other sessions.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional, type = "string")]
    pub parent_session_id: Option<Uuid>,
    /// The parent's tool call that started this child.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    #[schema(value_type = Option<String>)]
    pub parent_call_id: Option<CallId>,
}

impl From<&Session> for SessionRow {
    fn from(row: &Session) -> Self {
        SessionRow {
            id: row.id,
            agent: row.agent.clone(),
            status: row.status,
            metadata: row.metadata.clone(),
            last_seq: row.last_seq,
            created_at: row.created_at,
            updated_at: row.updated_at,
            closed_at: row.closed_at,
            parent_session_id: row.parent.as_ref().map(|p| p.session_id),
            parent_call_id: row.parent.as_ref().map(|p| p.call_id.clone()),
        }
    }
}

impl TS for ErrorCode {
    type WithoutGenerics = Self;
    type OptionInnerType = Self;

    fn name(_: &ts_rs::Config) -> String {
        "ErrorCode".into()
    }

    fn inline(_: &ts_rs::Config) -> String {
        let mut codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        codes.sort_unstable();
        codes.dedup();
        codes
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(" | ")
    }

    fn decl(cfg: &ts_rs::Config) -> String {
        format!("type ErrorCode = {};", Self::inline(cfg))
    }

    fn decl_concrete(cfg: &ts_rs::Config) -> String {
        Self::decl(cfg)
    }
}

/// The TypeScript module `clients/typescript/client/src/generated/wire.ts` (`@stead/client`): every wire type, declared in order.
pub fn typescript() -> String {
    let cfg = ts_rs::Config::new().with_large_int("number");
    let declarations = [
        declaration::<SessionStatus>(&cfg),
        declaration::<Usage>(&cfg),
        declaration::<ApprovalScope>(&cfg),
        declaration::<MessageMode>(&cfg),
        declaration::<TurnEnd>(&cfg),
        declaration::<RequestedCall>(&cfg),
        declaration::<Overrides>(&cfg),
        declaration::<SeenTool>(&cfg),
        declaration::<stead_actors::Attachment>(&cfg),
        declaration::<AttachmentRef>(&cfg),
        declaration::<stead_actors::CatchUp>(&cfg),
        declaration::<stead_actors::events::ParentRef>(&cfg),
        declaration::<stead_actors::events::RootMessage>(&cfg),
        declaration::<stead_actors::events::Compaction>(&cfg),
        declaration::<stead_actors::ScheduleMessage>(&cfg),
        declaration::<stead_actors::ScheduleDef>(&cfg),
        declaration::<stead_guardrails::results::CheckOutcome>(&cfg),
        declaration::<stead_guardrails::results::Effect>(&cfg),
        declaration::<stead_guardrails::results::Finding>(&cfg),
        declaration::<stead_guardrails::results::GuardrailCheck>(&cfg),
        declaration::<SessionEvent>(&cfg),
        declaration::<EventView>(&cfg),
        declaration::<ErrorCode>(&cfg),
        declaration::<ServerFrame>(&cfg),
        declaration::<ClientFrame>(&cfg),
        declaration::<SessionRow>(&cfg),
        declaration::<stead_persistence::request_log::LogStatus>(&cfg),
        declaration::<stead_persistence::request_log::AttemptRecord>(&cfg),
        declaration::<stead_model::log::GuardrailEntry>(&cfg),
        declaration::<RequestLogEntry>(&cfg),
    ];
    format!(
        "// Generated from Stead's Rust wire types (edge/src/wire.rs) — do not edit.\n\
         // Regenerate: STEAD_WRITE_WIRE_TYPES=1 cargo test -p stead-http wire_types\n\n{}",
        declarations.join("\n")
    )
}

fn declaration<T: TS>(cfg: &ts_rs::Config) -> String {
    let docs = T::docs()
        .map(|d| format!("{}\n", d.trim_end()))
        .unwrap_or_default();
    format!("{docs}export {}\n", T::decl(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_types_match_the_clients_generated_module() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../clients/typescript/client/src/generated/wire.ts"
        );
        let generated = typescript();
        if std::env::var_os("STEAD_WRITE_WIRE_TYPES").is_some() {
            std::fs::write(path, &generated).expect("write wire.ts");
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "clients/typescript/client/src/generated/wire.ts differs from the Rust wire types; regenerate it with \
             `STEAD_WRITE_WIRE_TYPES=1 cargo test -p stead-http wire_types` and commit it"
        );
    }

    /// A live `event` frame carries the in-memory payload; `GET …/events` parses the stored
    /// text back. Both must be the same value: floats (latencies) read back exactly
    /// (serde_json's `float_roundtrip`; without it this latency came back one ulp off).
    #[test]
    fn floats_read_back_from_the_journal_equal_the_live_ones() {
        use serde_json::json;
        for live in [
            1.680_702_000_000_000_1_f64,
            0.1 + 0.2,
            1e-7 / 3.0,
            123_456.789_012_345,
        ] {
            let stored = serde_json::to_string(&json!({ "ttft_ms": live })).unwrap();
            let read: serde_json::Value = serde_json::from_str(&stored).unwrap();
            assert_eq!(read["ttft_ms"].as_f64(), Some(live), "{stored}");
        }
    }

    #[test]
    fn server_frames_serialize_as_documented() {
        let frame = ServerFrame::Delta {
            call_id: "m1".into(),
            attempt: 2,
            text: "Hi".into(),
            offset: 3,
        };
        assert_eq!(
            serde_json::to_value(&frame).unwrap(),
            serde_json::json!({ "type": "delta", "call_id": "m1", "attempt": 2, "text": "Hi", "offset": 3 })
        );
        let event = ServerFrame::Event(EventView {
            seq: 2,
            kind: "assistant_message".into(),
            payload: serde_json::json!({ "text": "Paris" }),
            at: "2026-12-01T00:00:00.000000Z".into(),
        });
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            serde_json::json!({
                "type": "event", "seq": 2, "kind": "assistant_message",
                "payload": { "text": "Paris" }, "at": "2026-12-01T00:00:00.000000Z"
            })
        );
        let error = ServerFrame::Error {
            code: ErrorCode::InvalidFrame,
            message: "bad".into(),
        };
        assert_eq!(
            serde_json::to_value(&error).unwrap(),
            serde_json::json!({ "type": "error", "code": "invalid_frame", "message": "bad" })
        );
    }
}

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::{Error, Result};
use stead_model::{CallId, Epoch};

/// Lifecycle status of a session, as stored and as shown to clients (docs/api.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Idle,
    Running,
    AwaitingApproval,
    Failed,
    Closed,
}

impl SessionStatus {
    pub const ALL: [SessionStatus; 5] = [
        SessionStatus::Idle,
        SessionStatus::Running,
        SessionStatus::AwaitingApproval,
        SessionStatus::Failed,
        SessionStatus::Closed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Idle => "idle",
            SessionStatus::Running => "running",
            SessionStatus::AwaitingApproval => "awaiting_approval",
            SessionStatus::Failed => "failed",
            SessionStatus::Closed => "closed",
        }
    }
}

impl std::fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for SessionStatus {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SessionStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::str::FromStr for SessionStatus {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        SessionStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| Error::InvalidInput(format!("unknown session status `{s}`")))
    }
}

/// What a caller supplies to create a session.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSession {
    /// The project it belongs to; a child session is always in its parent's, whatever this
    /// says.
    pub project_id: Uuid,
    /// Fixed id (imports, forks); `None` assigns a fresh time-ordered UUIDv7.
    pub id: Option<Uuid>,
    pub agent: String,
    pub metadata: Value,
    /// The session and tool call that started this one (a sub-agent's child session).
    pub parent: Option<ParentLink>,
}

/// The session and the tool call that started a child session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParentLink {
    pub session_id: Uuid,
    pub call_id: CallId,
}

impl NewSession {
    pub fn for_agent(agent: impl Into<String>) -> Self {
        NewSession {
            project_id: crate::DEFAULT_PROJECT,
            id: None,
            agent: agent.into(),
            metadata: Value::Object(Default::default()),
            parent: None,
        }
    }
}

/// What one message of a top-level session has spent on sub-agents
/// ([`crate::Sessions::charge_delegation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelegationCounts {
    /// Model calls of its descendants.
    pub model_calls: i64,
    /// Child sessions started under it, at any depth.
    pub sessions: i64,
}

/// A stored session row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Session {
    pub id: Uuid,
    pub agent: String,
    pub status: SessionStatus,
    pub metadata: Value,
    /// Seq of the last journal event (0 when the journal is empty).
    pub last_seq: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    /// The generation of the session's token: only a token issued for it is valid (rotation
    /// increments it).
    pub token_generation: i64,
    /// Set on a child session: who started it.
    pub parent: Option<ParentLink>,
    /// The project the session belongs to (a child session: its parent's).
    pub project_id: Uuid,
}

impl Session {
    /// A new, empty, idle session (a fresh UUIDv7 unless the caller fixed the id).
    pub(crate) fn new_idle(new: NewSession) -> Self {
        let now = now_micros();
        Session {
            id: new.id.unwrap_or_else(Uuid::now_v7),
            agent: new.agent,
            status: SessionStatus::Idle,
            metadata: new.metadata,
            last_seq: 0,
            created_at: now,
            updated_at: now,
            closed_at: None,
            token_generation: 0,
            parent: new.parent,
            project_id: new.project_id,
        }
    }
}

/// What a purge removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purged {
    pub events: u64,
    pub request_log_rows: u64,
    /// The session's artifacts' rows that went.
    pub artifacts: u64,
    /// The blobs of those artifacts that no other row names: the caller deletes them from the
    /// artifact store (after the purge committed).
    pub orphaned_blobs: Vec<String>,
}

/// Filter and page for [`crate::JournalStore::list_sessions`].
#[derive(Debug, Clone, Default)]
pub struct SessionQuery {
    /// Whose sessions: the installation's (all) or one project's.
    pub scope: crate::Scope,
    pub agent: Option<String>,
    /// Only the children of this session.
    pub parent: Option<Uuid>,
    /// Only the sessions of this evaluation run; without it, no evaluation's sessions.
    pub eval_run: Option<Uuid>,
    pub status: Option<SessionStatus>,
    /// Page size; clamped to `1..=MAX_PAGE`.
    pub limit: u32,
    /// Opaque cursor from a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// One page of sessions, newest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionPage {
    pub sessions: Vec<Session>,
    /// Cursor for the next (older) page; `None` on the last page.
    pub next_cursor: Option<String>,
}

pub const MAX_PAGE: u32 = 500;
pub const DEFAULT_PAGE: u32 = 50;

/// A position in the newest-first session order: `(created_at, id)`, both descending.
///
/// Keyset pagination on this pair is stable under inserts: new sessions sort before every
/// cursor already handed out, so later pages never repeat or skip a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionCursor {
    pub created_at_us: i64,
    pub id: Uuid,
}

impl SessionCursor {
    pub fn of(session: &Session) -> Self {
        SessionCursor {
            created_at_us: session.created_at.timestamp_micros(),
            id: session.id,
        }
    }

    pub fn encode(&self) -> String {
        format!("{:x}.{}", self.created_at_us, self.id.simple())
    }

    pub fn decode(cursor: &str) -> Result<Self> {
        let bad = || Error::InvalidInput(format!("malformed cursor `{cursor}`"));
        let (time, id) = cursor.split_once('.').ok_or_else(bad)?;
        Ok(SessionCursor {
            created_at_us: i64::from_str_radix(time, 16).map_err(|_| bad())?,
            id: Uuid::try_parse(id).map_err(|_| bad())?,
        })
    }
}

impl SessionQuery {
    pub(crate) fn page_size(&self) -> u32 {
        match self.limit {
            0 => DEFAULT_PAGE,
            n => n.min(MAX_PAGE),
        }
    }

    pub(crate) fn decoded_cursor(&self) -> Result<Option<SessionCursor>> {
        self.cursor
            .as_deref()
            .map(SessionCursor::decode)
            .transpose()
    }
}

/// Builds a page from up to `limit + 1` rows fetched in order.
pub(crate) fn into_page(mut rows: Vec<Session>, limit: u32) -> SessionPage {
    let next_cursor = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(|s| SessionCursor::of(s).encode())
    } else {
        None
    };
    SessionPage {
        sessions: rows,
        next_cursor,
    }
}

/// An event to append. Its seq is assigned by the store; its timestamp is fixed when it is
/// made (microsecond precision, as stored), so the writer knows each event's `created_at`
/// without reading it back.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: String,
    pub payload: Value,
    pub created_at: DateTime<Utc>,
}

impl NewEvent {
    pub fn new(kind: impl Into<String>, payload: Value) -> Self {
        NewEvent {
            kind: kind.into(),
            payload,
            created_at: now_micros(),
        }
    }
}

/// A committed journal event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub session_id: Uuid,
    pub seq: i64,
    pub kind: String,
    pub payload: Value,
    pub created_at: DateTime<Utc>,
}

/// A node as it registers in the cluster (docs/cluster.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub node_id: String,
    /// How other nodes reach this one (`[cluster] advertise_url`).
    pub advertise_url: String,
    pub version: String,
    /// This process, new at each start: a node's own heartbeat is told from another live
    /// process's under the same node id.
    pub instance: Uuid,
    /// The node's first heartbeat since it started: `started_at` is set to now, and the row is
    /// taken over when its holder is this node's predecessor (the same advertised address) or
    /// dead.
    pub starting: bool,
}

/// A registered node as the cluster sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub node_id: String,
    pub advertise_url: String,
    pub version: String,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    /// Its heartbeat is fresher than the TTL asked with.
    pub alive: bool,
    /// Sessions whose live lease it holds.
    pub sessions: i64,
}

/// A strict budget's reservation as a node asks for it (docs/cluster.md: budgets shared by
/// the nodes of a cluster).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetRequest {
    /// Whose budget (the router's limits key).
    pub key: String,
    /// The node that holds the reservation until its call settles.
    pub node_id: String,
    /// The most the call may cost.
    pub amount: f64,
    /// The budget per window.
    pub budget: f64,
    pub window: Duration,
    /// A node whose heartbeat is older than this is dead: its reservations are booked as spent.
    /// `None` on a node outside a cluster: every reservation of another node id (this node's
    /// earlier runs) is.
    pub node_ttl: Option<Duration>,
}

/// What a reservation came to.
#[derive(Debug, Clone, PartialEq)]
pub enum BudgetDecision {
    /// Set aside; settle it with this id.
    Reserved(Uuid),
    /// It does not fit what is left of the window.
    Refused {
        spent: f64,
        reserved: f64,
        window_start: DateTime<Utc>,
    },
}

/// A session's lease as held: who, the fencing epoch, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub owner: String,
    pub epoch: Epoch,
    pub expires_at: DateTime<Utc>,
}

/// The folded state of a session at `seq`, written by the session actor every N events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub session_id: Uuid,
    pub seq: i64,
    pub state: Value,
    pub created_at: DateTime<Utc>,
}

/// A compacted journal prefix: events `1..=through_seq` were replaced by the folded state at
/// `through_seq` (the same versioned document as a [`Snapshot`]) and a summary of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    pub session_id: Uuid,
    pub through_seq: i64,
    pub state: Value,
    pub summary: Value,
    pub compacted_at: DateTime<Utc>,
}

/// One entry of a session's durable key–value storage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvEntry {
    pub key: String,
    pub value: Value,
    pub updated_at: DateTime<Utc>,
}

/// The current time truncated to microseconds, the precision both backends store, so that a
/// value read back equals the value written.
pub(crate) fn now_micros() -> DateTime<Utc> {
    micros_to_time(Utc::now().timestamp_micros())
}

pub(crate) fn micros_to_time(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips_and_rejects_garbage() {
        let cursor = SessionCursor {
            created_at_us: 1_764_480_000_123_456,
            id: Uuid::now_v7(),
        };
        assert_eq!(SessionCursor::decode(&cursor.encode()).unwrap(), cursor);
        for bad in [
            "",
            "abc",
            "zz.00000000000000000000000000000000",
            "1.not-a-uuid",
        ] {
            assert!(SessionCursor::decode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn status_names_match_the_wire() {
        for status in SessionStatus::ALL {
            let wire = serde_json::to_value(status).unwrap();
            assert_eq!(wire, serde_json::json!(status.as_str()));
            assert_eq!(status.as_str().parse::<SessionStatus>().unwrap(), status);
        }
        assert!("parked".parse::<SessionStatus>().is_err());
    }

    #[test]
    fn page_size_is_clamped() {
        let query = |limit| SessionQuery {
            scope: crate::Scope::Installation,
            limit,
            ..Default::default()
        };
        assert_eq!(query(0).page_size(), DEFAULT_PAGE);
        assert_eq!(query(7).page_size(), 7);
        assert_eq!(query(100_000).page_size(), MAX_PAGE);
    }
}

/// An upload's row (docs/artifacts.md): its bytes are the blob `sha256` in the artifact store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    pub id: Uuid,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    pub size: i64,
    /// As sniffed from the bytes, not as the client declared.
    pub content_type: String,
    /// The session it belongs to (purged with it); `None`: the project's, kept until deleted.
    pub session_id: Option<Uuid>,
    pub project_id: Uuid,
    /// Who uploaded it (the caller's principal, or `agent:{call_id}` for a tool's result).
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

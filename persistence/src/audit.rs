//! The audit log's rows (docs/audit.md): who did what, when, from where, in which project.
//! Appended by the HTTP edge after each state-changing request that succeeded; never updated
//! (both backends refuse an UPDATE); removed only by retention.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::Scope;

/// One act.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    /// Time-ordered (UUIDv7): the cursor of the newest-first pages.
    pub id: Uuid,
    pub at: DateTime<Utc>,
    pub project_id: Uuid,
    /// Who: `api_key:{fingerprint}`, `project_key:{id}`, `session_token:{session}`, `local`.
    pub actor: String,
    /// What: the operation (`POST /v1/projects/{project}/keys`, `ws approval`).
    pub action: String,
    /// The path it named (never a query string: tokens travel there).
    pub target: String,
    /// The answer's HTTP status.
    pub status: u16,
    /// The peer's address, when known.
    pub source: Option<String>,
    /// Facts the handler adds (ids made, a decision's outcome); never a secret or a body.
    pub details: Value,
}

/// Which acts to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    pub scope: Scope,
    pub actor: Option<String>,
    /// Actions starting with this.
    pub action: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// Acts older than this one (its id).
    pub before: Option<Uuid>,
    /// Clamped to `1..=MAX_PAGE`.
    pub limit: u32,
}

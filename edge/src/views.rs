//! The bodies the REST handlers answer with, as types: each is what its handler returns
//! (`Json<SessionView>`, …) and, through `utoipa`, the schema `/openapi.json` publishes for it —
//! one definition of every shape.

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use stead_actors::{CatchUp, ScheduleDef, ScheduleMessage, ScheduleState};

mod approvals;
pub use approvals::{ApprovalKind, BudgetNeed, HeldResult, PendingApproval};
use stead_persistence::SessionStatus;

use crate::wire::{EventView, SessionRow};
use stead_model::CallId;

/// `{"error":{"code","message"}}`.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable (see docs/api.md).
    pub code: String,
    pub message: String,
}

/// A created session with the token that grants access to it alone.
#[derive(Serialize, ToSchema)]
pub struct SessionCreated {
    #[serde(flatten)]
    pub row: SessionRow,
    pub token: String,
    /// When the token stops being valid (`null`: never; `sessions.token_ttl_secs`).
    pub token_expires_at: Option<DateTime<Utc>>,
}

/// What `DELETE /v1/sessions/{id}` answers: the closed session, or with `purge=true` what
/// was removed.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum Closed {
    Session(Box<SessionView>),
    Purged(PurgedView),
}

/// A purged session: what went.
#[derive(Serialize, ToSchema)]
pub struct PurgedView {
    pub session_id: Uuid,
    pub purged: bool,
    pub events: u64,
    pub request_log_rows: u64,
    /// The session's artifacts removed (docs/artifacts.md).
    pub artifacts: u64,
}

/// The timing and message of a schedule as REST shows it: exactly one of `at`, `delay_secs`,
/// `cron` (+ `tz`), `every_secs`, the message and the catch-up rule.
#[derive(Serialize, ToSchema)]
pub struct ScheduleTiming {
    /// `at`, `delay`, `cron` or `every`.
    pub kind: String,
    #[schema(value_type = Object)]
    pub message: ScheduleMessage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every_secs: Option<u64>,
    /// `one`, `all` or `skip`.
    #[schema(value_type = String)]
    pub catch_up: CatchUp,
}

impl From<&ScheduleDef> for ScheduleTiming {
    fn from(def: &ScheduleDef) -> Self {
        ScheduleTiming {
            kind: def.kind().to_string(),
            message: def.message.clone(),
            at: def.at,
            delay_secs: def.delay_secs,
            cron: def.cron.clone(),
            tz: def.tz.clone(),
            every_secs: def.every_secs,
            catch_up: def.catch_up,
        }
    }
}

/// A schedule of a session (docs/schedules.md): its definition and where it stands.
#[derive(Serialize, ToSchema)]
pub struct ScheduleView {
    pub key: String,
    #[serde(flatten)]
    pub timing: ScheduleTiming,
    pub created_at: DateTime<Utc>,
    /// `null` once a one-time schedule fired.
    pub next_due_at: Option<DateTime<Utc>>,
    /// Occurrences fired so far.
    pub fired: u64,
    /// `pending` or `done`.
    pub status: String,
}

impl ScheduleView {
    pub fn of(key: &str, schedule: &ScheduleState) -> Self {
        ScheduleView {
            key: key.to_string(),
            timing: (&schedule.def).into(),
            created_at: schedule.created_at,
            next_due_at: schedule.next_due_at,
            fired: schedule.fired,
            status: if schedule.next_due_at.is_some() {
                "pending"
            } else {
                "done"
            }
            .to_string(),
        }
    }
}

/// `{"schedules":[…]}`: pending first, earliest due first.
#[derive(Serialize, ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleView>,
}

/// A schedule of an agent: each occurrence starts a new session of the agent
/// (docs/schedules.md).
#[derive(Serialize, ToSchema)]
pub struct AgentScheduleView {
    pub key: String,
    pub agent: String,
    #[serde(flatten)]
    pub timing: ScheduleTiming,
    pub created_at: DateTime<Utc>,
    pub next_due_at: DateTime<Utc>,
}

/// `{"schedules":[…]}`, by key.
#[derive(Serialize, ToSchema)]
pub struct AgentScheduleList {
    pub schedules: Vec<AgentScheduleView>,
}

/// `{"agent", "key", "cancelled": true}`.
#[derive(Serialize, ToSchema)]
pub struct AgentScheduleCancelled {
    pub agent: String,
    pub key: String,
    pub cancelled: bool,
}

/// A row of the due index.
#[derive(Serialize, ToSchema)]
pub struct DueSchedule {
    pub session_id: Option<Uuid>,
    pub agent: String,
    pub key: String,
    /// A schedule's kind, or `approval_expiry`.
    pub kind: String,
    pub next_due_at: DateTime<Utc>,
    #[schema(value_type = Object)]
    pub definition: serde_json::Value,
}

/// `{"schedules":[…]}`, earliest due first.
#[derive(Serialize, ToSchema)]
pub struct DueScheduleList {
    pub schedules: Vec<DueSchedule>,
}

/// A one-minute token for opening a session's WebSocket (`?token=`).
#[derive(Serialize, ToSchema)]
pub struct Ticket {
    pub session_id: Uuid,
    pub ticket: String,
    pub expires_at: DateTime<Utc>,
}

/// A new token for a session; every older token of the session stops being valid.
#[derive(Serialize, ToSchema)]
pub struct TokenIssued {
    pub session_id: Uuid,
    pub token: String,
    /// When it stops being valid (`null`: never).
    pub token_expires_at: Option<DateTime<Utc>>,
}

#[derive(Serialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionRow>,
    pub next_cursor: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Serialize, ToSchema)]
pub struct ForkedFrom {
    pub session_id: String,
    pub at: i64,
}

/// A session in full.
#[derive(Serialize, ToSchema)]
pub struct SessionView {
    #[serde(flatten)]
    pub row: SessionRow,
    pub pending_approvals: Vec<PendingApproval>,
    pub usage: Usage,
    pub queued_messages: u64,
    pub forked_from: Option<ForkedFrom>,
    /// Why the session failed, when it did.
    pub failure: Option<String>,
}

/// A forked session with its token.
#[derive(Serialize, ToSchema)]
pub struct Forked {
    #[serde(flatten)]
    pub view: SessionView,
    pub token: String,
    /// When the token stops being valid (`null`: never).
    pub token_expires_at: Option<DateTime<Utc>>,
}

#[derive(Serialize, ToSchema)]
pub struct MessageAccepted {
    pub session_id: Uuid,
    /// The last seq committed by this message.
    pub seq: i64,
}

/// The answer to `?wait=true`: the turn ended or parked (200), or the wait ran out (202).
#[derive(Serialize, ToSchema)]
pub struct MessageWaited {
    pub session_id: Uuid,
    pub seq: i64,
    #[schema(value_type = String)]
    pub status: SessionStatus,
    pub last_seq: i64,
    pub reply: Option<String>,
    pub pending_approvals: Vec<PendingApproval>,
}

#[derive(Serialize, ToSchema)]
pub struct EventsPage {
    pub events: Vec<EventView>,
    pub last_seq: i64,
    /// Present when the journal was compacted: events up to this seq are summarized, not kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compacted_through: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct Decided {
    pub session_id: Uuid,
    #[schema(value_type = String)]
    pub call_id: CallId,
    pub approved: bool,
    pub seq: i64,
}

#[derive(Serialize, ToSchema)]
pub struct Committed {
    pub session_id: Uuid,
    pub seq: i64,
}

/// The folded state at `seq`.
#[derive(Serialize, ToSchema)]
pub struct StateView {
    pub session_id: Uuid,
    pub seq: i64,
    #[schema(value_type = String)]
    pub status: SessionStatus,
    #[schema(value_type = Object)]
    pub state: stead_actors::SessionState,
}

#[derive(Serialize, ToSchema)]
pub struct InboxApproval {
    #[serde(flatten)]
    pub approval: PendingApproval,
    pub session_id: Uuid,
    pub agent: String,
    /// Set for a child session's approval: the session whose `agent` call started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub parent_call_id: Option<CallId>,
}

/// A node of the cluster.
#[derive(Serialize, ToSchema)]
pub struct ClusterNodeView {
    pub node_id: String,
    pub advertise_url: String,
    pub version: String,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    /// Its heartbeat is younger than `cluster.node_ttl_secs`.
    pub alive: bool,
    /// Sessions whose live lease it holds.
    pub sessions: i64,
}

impl From<stead_persistence::NodeStatus> for ClusterNodeView {
    fn from(node: stead_persistence::NodeStatus) -> Self {
        ClusterNodeView {
            node_id: node.node_id,
            advertise_url: node.advertise_url,
            version: node.version,
            started_at: node.started_at,
            heartbeat_at: node.heartbeat_at,
            alive: node.alive,
            sessions: node.sessions,
        }
    }
}

/// `GET /v1/cluster`.
#[derive(Serialize, ToSchema)]
pub struct ClusterReport {
    /// Whether this node runs with `[cluster]`.
    pub clustered: bool,
    /// The node that answered.
    pub node_id: String,
    pub nodes: Vec<ClusterNodeView>,
}

#[derive(Serialize, ToSchema)]
pub struct Inbox {
    pub approvals: Vec<InboxApproval>,
}

#[derive(Serialize, ToSchema)]
pub struct ToolView {
    pub name: String,
    pub description: String,
    #[schema(value_type = Object)]
    pub parameters: serde_json::Value,
    /// `never`, `always` or a condition on the arguments.
    pub approval: String,
    pub idempotent: bool,
}

#[derive(Serialize, ToSchema)]
pub struct AgentView {
    pub name: String,
    pub route: String,
    pub system_prompt: String,
    pub max_steps: u32,
    pub approval_timeout_secs: Option<u64>,
    /// Configured tools, then the MCP tools its servers offer now (`{server}__{tool}`).
    pub tools: Vec<ToolView>,
    /// The MCP servers it takes tools from.
    pub mcp_servers: Vec<String>,
}

/// One MCP server Stead is a client of.
#[derive(Serialize, ToSchema)]
pub struct McpServerView {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// `starting`, `ready`, `restarting` or `stopped`.
    pub status: String,
    /// Its tools as it lists them.
    pub tools: Vec<McpToolView>,
    /// Tools left out because their input schema is invalid.
    pub rejected_tools: Vec<RejectedTool>,
    pub last_error: Option<String>,
    pub restarts: u64,
    pub calls: u64,
    pub errors: u64,
}

/// A tool an MCP server lists.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct McpToolView {
    pub name: String,
    pub description: String,
    #[schema(value_type = Object)]
    pub input_schema: serde_json::Value,
}

/// A tool an MCP server lists that Stead leaves out, and why.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RejectedTool {
    pub name: String,
    pub error: String,
}

#[derive(Serialize, ToSchema)]
pub struct McpServerList {
    pub servers: Vec<McpServerView>,
}

#[derive(Serialize, ToSchema)]
pub struct AgentList {
    pub agents: Vec<AgentView>,
}

/// One model (a route) in OpenAI's list format.
#[derive(Serialize, ToSchema)]
pub struct ModelEntry {
    pub id: String,
    pub object: String,
    pub created: i64,
    pub owned_by: String,
}

#[derive(Serialize, ToSchema)]
pub struct ModelList {
    pub object: String,
    pub data: Vec<ModelEntry>,
}

#[derive(Serialize, ToSchema)]
pub struct Health {
    pub status: String,
    pub version: String,
}

#[derive(Serialize, ToSchema)]
pub struct Ready {
    pub status: String,
    pub database: String,
}

/// A page of the request log, newest first.
#[derive(Serialize, ToSchema)]
pub struct LogPage {
    #[schema(value_type = Vec<Object>)]
    pub logs: Vec<stead_persistence::request_log::RequestLogEntry>,
    pub next_cursor: Option<String>,
}

/// The request log's figures, by group.
#[derive(Serialize, ToSchema)]
pub struct LogStats {
    pub group_by: String,
    #[schema(value_type = Vec<Object>)]
    pub groups: Vec<stead_persistence::request_log::StatsRow>,
}

/// A knowledge collection (docs/knowledge.md).
#[derive(Serialize, ToSchema)]
pub struct CollectionView {
    pub name: String,
    pub embedding_route: String,
    /// The model that made its embeddings (`null` while it has none).
    pub model: Option<String>,
    pub dimension: Option<i64>,
    pub documents: i64,
    pub chunks: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<&stead_persistence::CollectionRow> for CollectionView {
    fn from(row: &stead_persistence::CollectionRow) -> Self {
        CollectionView {
            name: row.name.clone(),
            embedding_route: row.embedding_route.clone(),
            model: row.model.clone(),
            dimension: row.dimension,
            documents: row.documents,
            chunks: row.chunks,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct CollectionList {
    pub collections: Vec<CollectionView>,
}

/// A document of a collection, without its text.
#[derive(Serialize, ToSchema)]
pub struct DocumentView {
    pub id: String,
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
    pub chunks: i64,
    pub bytes: i64,
    pub sha256: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<&stead_persistence::DocumentRow> for DocumentView {
    fn from(row: &stead_persistence::DocumentRow) -> Self {
        DocumentView {
            id: row.id.clone(),
            metadata: row.metadata.clone(),
            chunks: row.chunks,
            bytes: row.bytes,
            sha256: row.sha256.clone(),
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// A document as stored by `PUT`: `created`, `replaced` or `unchanged`.
#[derive(Serialize, ToSchema)]
pub struct StoredDocument {
    #[serde(flatten)]
    pub document: DocumentView,
    pub outcome: String,
}

/// A document with its text and its chunks' texts.
#[derive(Serialize, ToSchema)]
pub struct DocumentText {
    #[serde(flatten)]
    pub document: DocumentView,
    pub text: String,
    pub chunk_texts: Vec<String>,
}

/// A page of a collection's documents; `next_after` continues it.
#[derive(Serialize, ToSchema)]
pub struct DocumentList {
    pub documents: Vec<DocumentView>,
    pub next_after: Option<String>,
}

/// One chunk a query found.
#[derive(Serialize, ToSchema)]
pub struct QueryHit {
    pub document_id: String,
    pub chunk_index: i64,
    pub chunk: String,
    pub score: f64,
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
}

/// A query's answer: the chunks found, best first.
#[derive(Serialize, ToSchema)]
pub struct QueryAnswer {
    pub collection: String,
    /// `exact`, `ann` or `hybrid`.
    pub mode: String,
    pub results: Vec<QueryHit>,
}

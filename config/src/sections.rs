//! The configuration's sections: `[server]`, `[database]`, `[log]`, `[sessions]`, the
//! providers and agents with their tools, each with its built-in defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ToolConfig, DEFAULT_DATA_DIR, DEFAULT_LISTEN};

/// How session actors snapshot, sleep and restart (`[sessions]`).
/// Where budget alerts go (`[budget_alerts]`, docs/tenancy.md, "Budget alerts").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetAlertsConfig {
    /// The webhook alerts are POSTed to (`None`: no alerts).
    pub url: Option<String>,
    /// The share of a key's or a project's budget whose spending in a window sends its alert
    /// (0 < share ≤ 1).
    pub share: f64,
    /// Headers sent as given.
    pub headers: std::collections::BTreeMap<String, String>,
    /// Headers whose values are read from these environment variables at start.
    pub headers_env: std::collections::BTreeMap<String, String>,
    /// How long one delivery may take.
    pub timeout_secs: f64,
}

impl Default for BudgetAlertsConfig {
    fn default() -> Self {
        BudgetAlertsConfig {
            url: None,
            share: 0.8,
            headers: Default::default(),
            headers_env: Default::default(),
            timeout_secs: 5.0,
        }
    }
}

/// The audit trail (`[audit]`, docs/audit.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Acts older than this many days are removed, once a day (0: kept for good).
    pub retention_days: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            retention_days: 400,
        }
    }
}

/// The artifact store (`[artifacts]`, docs/artifacts.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArtifactsConfig {
    /// Where the blobs live; absent: the directory `{data_dir}/artifacts`.
    pub store: Option<stead_artifacts::BlobConfig>,
    /// Largest upload, in bytes.
    pub max_bytes: usize,
}

impl Default for ArtifactsConfig {
    fn default() -> Self {
        ArtifactsConfig {
            store: None,
            max_bytes: 25 << 20,
        }
    }
}

impl ArtifactsConfig {
    /// The first bad value, as `(key, problem)`.
    pub(crate) fn problem(&self) -> Option<(&'static str, &'static str)> {
        if self.max_bytes == 0 {
            return Some(("artifacts.max_bytes", "must be at least 1"));
        }
        match &self.store {
            Some(stead_artifacts::BlobConfig::S3 { bucket, .. }) if bucket.trim().is_empty() => {
                Some(("artifacts.store.bucket", "must name a bucket"))
            }
            Some(stead_artifacts::BlobConfig::S3 {
                access_key_env,
                secret_key_env,
                ..
            }) if [access_key_env, secret_key_env]
                .iter()
                .any(|name| name.starts_with("STEAD_")) =>
            {
                Some((
                    "artifacts.store.access_key_env",
                    "the key variables must not start with STEAD_ (those are configuration)",
                ))
            }
            _ => None,
        }
    }

    /// The store, with the default resolved against `data_dir`.
    pub fn blob_config(&self, data_dir: &std::path::Path) -> stead_artifacts::BlobConfig {
        self.store
            .clone()
            .unwrap_or_else(|| stead_artifacts::BlobConfig::Filesystem {
                path: data_dir.join("artifacts"),
            })
    }
}

/// Schedules and timers (`[schedules]`, docs/schedules.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulesConfig {
    /// The shortest `every_secs` a schedule may have.
    pub min_interval_secs: u64,
    /// Pending schedules one session may hold; more are refused (422 `too_many_schedules`).
    pub max_per_session: usize,
    /// Firings one session's schedules may make in any hour, all together; occurrences over
    /// it wait (docs/schedules.md, "Limits").
    pub max_firings_per_hour: u32,
    /// The longest the scheduler sleeps between two looks at the due index (it also wakes
    /// when this node writes a row, and at the earliest due time): how soon a schedule written
    /// by another node is seen.
    pub poll_ms: u64,
}

impl Default for SchedulesConfig {
    fn default() -> Self {
        let limits = stead_actors::ScheduleLimits::default();
        SchedulesConfig {
            min_interval_secs: limits.min_interval_secs,
            max_per_session: limits.max_per_session,
            max_firings_per_hour: limits.max_firings_per_hour,
            poll_ms: 1000,
        }
    }
}

impl SchedulesConfig {
    /// The limits of sessions that hold at most `max_queued` messages while a turn runs.
    pub fn limits(&self, max_queued: usize) -> stead_actors::ScheduleLimits {
        stead_actors::ScheduleLimits {
            min_interval_secs: self.min_interval_secs,
            max_per_session: self.max_per_session,
            max_firings_per_hour: self.max_firings_per_hour,
            max_queued,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// Write a snapshot of a session's folded state every this many events.
    pub snapshot_every: i64,
    /// Passivate an actor idle this long with no clients attached.
    pub passivate_after_secs: u64,
    /// Passivate sooner an actor whose turn is parked on a person's decision, with no clients
    /// attached (the decision or the approval's expiry wakes it).
    pub passivate_parked_after_secs: u64,
    /// A session whose actor fails this many times within `restart_window_secs` is failed.
    pub restart_limit: u32,
    pub restart_window_secs: u64,
    /// First restart delay, doubled per failure up to `restart_backoff_max_ms`.
    pub restart_backoff_ms: u64,
    pub restart_backoff_max_ms: u64,
    /// An activation's lease on its session (`docs/architecture.md`, invariant 1), renewed
    /// every third of it.
    pub lease_ttl_secs: u64,
    /// Journal retention: keep an ended (closed or failed) session's full journal this many
    /// days after its last change, then compact it to a snapshot plus a summary. Unset: keep
    /// every journal whole. Open and parked sessions are never compacted.
    pub keep_journal_days: Option<u64>,
    /// How often the server looks for journals to compact (with `keep_journal_days` set).
    pub retention_sweep_secs: u64,
    /// User messages a session holds while a turn runs; more get 429 `queue_full`.
    pub max_queued_messages: usize,
    /// How long a session token is valid from when it is minted (0: until rotated).
    pub token_ttl_secs: u64,
    /// How deep sessions may delegate through `agent` tools (a session at this depth cannot
    /// start a child).
    pub max_delegation_depth: u32,
    /// The most `agent` calls one model answer may start (the rest fail back to the model).
    pub max_delegation_fanout: u32,
    /// The most model calls the sub-agents under one message of a top-level session (its
    /// children and all their descendants) may make together.
    pub max_delegation_steps: u32,
    /// The most child sessions one message of a top-level session may start, at any depth.
    pub max_delegation_sessions: u32,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        let lifecycle = stead_actors::session::Lifecycle::default();
        SessionsConfig {
            snapshot_every: lifecycle.snapshot_every,
            passivate_after_secs: lifecycle.passivate_after.as_secs(),
            passivate_parked_after_secs: lifecycle.passivate_parked_after.as_secs(),
            restart_limit: lifecycle.restart_limit,
            restart_window_secs: lifecycle.restart_window.as_secs(),
            restart_backoff_ms: lifecycle.restart_backoff.as_millis() as u64,
            restart_backoff_max_ms: lifecycle.restart_backoff_max.as_millis() as u64,
            lease_ttl_secs: lifecycle.lease_ttl.as_secs(),
            keep_journal_days: None,
            retention_sweep_secs: 3600,
            max_queued_messages: lifecycle.max_queued_messages,
            token_ttl_secs: 30 * 24 * 3600,
            max_delegation_depth: stead_actors::DEFAULT_MAX_DEPTH,
            max_delegation_fanout: stead_actors::DEFAULT_MAX_FANOUT,
            max_delegation_steps: stead_actors::DEFAULT_MAX_DELEGATION_STEPS,
            max_delegation_sessions: stead_actors::DEFAULT_MAX_DELEGATION_SESSIONS,
        }
    }
}

impl SessionsConfig {
    pub fn lifecycle(&self) -> stead_actors::session::Lifecycle {
        use std::time::Duration;
        stead_actors::session::Lifecycle {
            snapshot_every: self.snapshot_every,
            passivate_after: Duration::from_secs(self.passivate_after_secs),
            passivate_parked_after: Duration::from_secs(self.passivate_parked_after_secs),
            restart_limit: self.restart_limit,
            restart_window: Duration::from_secs(self.restart_window_secs),
            restart_backoff: Duration::from_millis(self.restart_backoff_ms),
            restart_backoff_max: Duration::from_millis(self.restart_backoff_max_ms),
            lease_ttl: Duration::from_secs(self.lease_ttl_secs),
            max_queued_messages: self.max_queued_messages,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    pub data_dir: PathBuf,
    /// Plaintext keys or `sha256:<hex>` digests; empty means loopback only.
    pub api_keys: Vec<String>,
    /// How long a graceful shutdown waits for requests in flight.
    pub shutdown_grace_secs: u64,
    /// This node's name as the owner of session leases; unset: the host name. Nodes that share
    /// a database need distinct names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Host names (no port) an open server (no API keys) answers besides loopback ones.
    pub allowed_hosts: Vec<String>,
    /// Origins (`https://app.example.com`, scheme, host and port only) whose pages may call
    /// the API from a browser (CORS, docs/clients.md). An open server also accepts their
    /// `Origin` header.
    pub cors_origins: Vec<String>,
    /// A client must send a request's headers within this many seconds.
    pub header_timeout_secs: u64,
    /// A request's whole body must arrive within this many seconds of its headers.
    pub body_timeout_secs: u64,
    /// Most TCP connections held at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Most WebSocket connections one session holds at once.
    pub max_websockets_per_session: usize,
    /// Seconds between a WebSocket's pings (and credential re-checks); a client silent for
    /// three of them is gone and its socket closes.
    pub ws_heartbeat_secs: u64,
    /// Single sign-on (`[server.oidc]`, docs/tenancy.md); absent: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc: Option<crate::oidc::OidcConfig>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `postgres://…` or `sqlite://PATH`; unset means `sqlite://{data_dir}/stead.db`.
    pub url: Option<String>,
    pub max_event_bytes: usize,
    pub max_connections: u32,
    pub connect_timeout_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A `tracing` filter, e.g. `info` or `stead=debug,sqlx=warn`. `RUST_LOG` wins when set.
    pub filter: String,
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// The pooled local ONNX Runtime engine.
    Onnx,
    /// Any OpenAI-compatible HTTP API.
    Openai,
    /// Anthropic's Messages API (docs/gateway.md).
    Anthropic,
    /// The local embedding model (docs/knowledge.md): embeddings only.
    #[serde(rename = "onnx_embedding")]
    OnnxEmbedding,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub name: String,
    pub kind: ProviderKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_dir: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// openai, anthropic: the most MiB of one answer, whole or streamed (default 16;
    /// embeddings answers may be 8 times as large). A larger answer fails its attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_answer_mib: Option<usize>,
    /// onnx: the local engine's pool.
    #[serde(default, flatten)]
    pub engine: EngineConfig,
}

/// How an `onnx` provider runs (ignored by other kinds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EngineConfig {
    /// `cpu`, `cuda` (fail at start when unavailable) or `auto` (CUDA, else CPU with a warning).
    pub execution_provider: stead_inference::engine::ExecutionProvider,
    /// Engine workers, each with its own session and batch.
    pub workers: usize,
    /// Intra-op threads per worker; 0 = physical cores ÷ workers.
    pub threads_per_worker: usize,
    /// Most sequences one worker decodes together (continuous batching).
    pub max_batch: usize,
    /// Most requests waiting for a worker; more are refused as overloaded.
    pub queue_capacity: usize,
    /// Memory for the KV of recent prompt prefixes (all workers together); 0 = off.
    pub prefix_cache_bytes: usize,
    /// Shortest cached prefix reused; shorter matches are prefilled.
    pub prefix_cache_min_tokens: usize,
    /// In `auto` tool mode, a reply that only repeats the call whose result the model was just
    /// given is decoded again as text (small models otherwise call the same tool in a loop).
    pub block_repeated_calls: bool,
    /// In `auto` tool mode, a conversation that ends with tool results gets a last system
    /// message asking for a plain answer that uses them (docs/inference.md, "Tool calling").
    pub tool_result_hint: bool,
    /// In `auto` tool mode, turns before the last user message are folded into the system
    /// message as a plain transcript (docs/inference.md, "Tool calling").
    pub digest_history: bool,
    /// In `auto` tool mode, a last user message that is only small talk (a greeting, thanks, a
    /// goodbye, "what can you do?") is answered without tools (docs/inference.md, "Small
    /// talk").
    pub small_talk: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            execution_provider: stead_inference::engine::ExecutionProvider::Cpu,
            workers: 1,
            threads_per_worker: 0,
            max_batch: 8,
            queue_capacity: 64,
            prefix_cache_bytes: stead_inference::pool::DEFAULT_PREFIX_CACHE_BYTES,
            prefix_cache_min_tokens: stead_inference::pool::DEFAULT_PREFIX_CACHE_MIN_TOKENS,
            block_repeated_calls: true,
            tool_result_hint: true,
            digest_history: true,
            small_talk: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    pub name: String,
    pub route: String,
    #[serde(default)]
    pub system_prompt: String,
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// An approval not decided within this many seconds is rejected as expired (unset: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout_secs: Option<u64>,
    /// What a user message that names no `mode` does while a turn runs: `queue` (default),
    /// `interrupt`, `steer` or `drop_if_busy` (docs/sessions.md).
    #[serde(default, skip_serializing_if = "is_queue")]
    pub message_mode: stead_actors::MessageMode,
    #[serde(default)]
    pub tools: Vec<ToolConfig>,
    /// Prompt templates (minijinja) a schedule may deliver by name (`message.callback`), with
    /// `key`, `due_at`, `missed` and `args` in scope (docs/schedules.md).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub callbacks: BTreeMap<String, String>,
    /// How the session's prompts stay inside their budget (docs/sessions.md, "Context
    /// management").
    #[serde(default)]
    pub context: ContextConfig,
    /// `[[guardrails]]` names run, in order, over each of its tools' results before the model
    /// sees them (docs/guardrails.md, "Tool results").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guardrails: Vec<String>,
}

/// `[agents.context]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// The most prompt tokens one model call may send (unset: 75 % of the route's context
    /// window when the router knows it — local models — else no bound).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_prompt_tokens: Option<u64>,
    /// `summarize` (default) or `truncate`.
    pub strategy: stead_actors::context::Strategy,
    /// The route that writes summaries (unset: the agent's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_route: Option<String>,
    /// Tool results longer than this many tokens are shown to the model cut.
    pub max_tool_result_tokens: u64,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            max_prompt_tokens: None,
            strategy: Default::default(),
            summary_route: None,
            max_tool_result_tokens: stead_actors::context::DEFAULT_MAX_TOOL_RESULT_TOKENS,
        }
    }
}

fn is_queue(mode: &stead_actors::MessageMode) -> bool {
    *mode == stead_actors::MessageMode::Queue
}

fn default_max_steps() -> u32 {
    8
}

pub(crate) fn default_approval() -> String {
    "never".into()
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: DEFAULT_LISTEN.into(),
            data_dir: DEFAULT_DATA_DIR.into(),
            api_keys: Vec::new(),
            shutdown_grace_secs: 10,
            node_id: None,
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            header_timeout_secs: 10,
            body_timeout_secs: 30,
            max_connections: 10_000,
            max_websockets_per_session: 16,
            ws_heartbeat_secs: 20,
            oidc: None,
        }
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: None,
            max_event_bytes: stead_persistence::DEFAULT_MAX_EVENT_BYTES,
            max_connections: 8,
            connect_timeout_secs: 5,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            filter: "info".into(),
            format: LogFormat::Text,
        }
    }
}

/// `[cluster]`: several nodes on one PostgreSQL (docs/cluster.md). Absent: the node runs alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// How the other nodes reach this one (`http://node-a.internal:8787`).
    pub advertise_url: String,
    /// The environment variable that holds the node-to-node secret every node shares (at
    /// least 32 bytes); the value itself never goes in the file.
    pub secret_env: String,
    /// How often the node refreshes its heartbeat.
    #[serde(default = "default_heartbeat_secs")]
    pub heartbeat_secs: u64,
    /// A node whose heartbeat is older than this is dead.
    #[serde(default = "default_node_ttl_secs")]
    pub node_ttl_secs: u64,
    /// How often the node looks for running sessions whose lease ran out (a dead node's
    /// turns) and takes them over.
    #[serde(default = "default_sweep_secs")]
    pub sweep_secs: u64,
}

fn default_heartbeat_secs() -> u64 {
    2
}

fn default_node_ttl_secs() -> u64 {
    10
}

fn default_sweep_secs() -> u64 {
    2
}

/// Knowledge collections (`[knowledge]`, docs/knowledge.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KnowledgeConfig {
    /// The route new collections embed through when they name none.
    pub embedding_route: String,
    /// Most words in one chunk.
    pub chunk_words: usize,
    /// Words a chunk repeats from the end of the one before it.
    pub chunk_overlap_words: usize,
    /// Largest document text accepted, in bytes.
    pub max_document_bytes: usize,
    /// Largest `top_k` of a query.
    pub max_top_k: usize,
}

impl Default for KnowledgeConfig {
    fn default() -> Self {
        KnowledgeConfig {
            embedding_route: "embed".into(),
            chunk_words: 120,
            chunk_overlap_words: 24,
            max_document_bytes: 512 * 1024,
            max_top_k: 50,
        }
    }
}

/// How a knowledge query searches (`[[agents.tools]] search`, and a query's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchMode {
    Exact,
    Ann,
    Hybrid,
}

impl SearchMode {
    pub fn parse(text: &str) -> Option<SearchMode> {
        match text {
            "exact" => Some(SearchMode::Exact),
            "ann" => Some(SearchMode::Ann),
            "hybrid" => Some(SearchMode::Hybrid),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::Exact => "exact",
            SearchMode::Ann => "ann",
            SearchMode::Hybrid => "hybrid",
        }
    }
}

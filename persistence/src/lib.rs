//! `stead-persistence` owns everything Stead keeps on disk: sessions, the write-ahead journal,
//! leases, snapshots of folded session state, each session's durable key–value storage and the
//! model router's request log and evaluations' datasets and runs, behind narrow traits
//! ([`Sessions`], [`Journal`], [`Leases`], [`Snapshots`], [`Kv`], [`RequestLog`], [`Evals`];
//! [`JournalStore`] is all of them) with one SQL core over
//! a PostgreSQL and an embedded SQLite dialect (sqlx).
//!
//! The journal's guarantees, on both backends:
//! - seqs of a session are gapless from 1 and assigned by the store;
//! - [`Journal::append`] is atomic and fenced: a writer whose `expected_last_seq` is stale
//!   gets [`Error::Conflict`] and writes nothing, so exactly one writer wins each seq;
//! - an append returns only after its transaction committed durably (SQLite WAL with
//!   `synchronous=FULL`, PostgreSQL with the server's `synchronous_commit`); appends from many
//!   sessions that arrive together share one transaction (group commit, see [`group_commit`]).
//!
//! It knows nothing of actors, HTTP or models. It does not interpret event kinds or payloads:
//! lifecycle rules (a closed session takes no new turns) belong to the session actor.

pub mod audit;
mod commit_queue;
mod error;
pub mod evals;
pub mod group_commit;
pub mod knowledge;
pub mod request_log;
pub mod schedules;
pub mod scratch;
mod store;
pub mod tenancy;
mod traits;
mod types;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub use error::{Error, Result};
pub use group_commit::JournalStats;
pub use knowledge::{
    ChunkRow, CollectionChunks, CollectionKey, CollectionRow, DocumentRow, NewChunk, PutDocument,
    PutOutcome, Reembedding,
};
pub use schedules::{ScheduleOwner, ScheduleQuery, ScheduleRow};
pub use tenancy::{Scope, DEFAULT_PROJECT};
pub use traits::{
    Artifacts, Audit, Budgets, Evals, Journal, JournalStore, Knowledge, Kv, Leases, RequestLog,
    Schedules, SessionStore, Sessions, Snapshots, Tenancy,
};
pub use types::{
    Artifact, BudgetDecision, BudgetRequest, ClusterNode, Compaction, DelegationCounts, Event,
    KvEntry, Lease, NewEvent, NewSession, NodeStatus, ParentLink, Purged, Session, SessionPage,
    SessionQuery, SessionStatus, Snapshot, DEFAULT_PAGE, MAX_PAGE,
};

/// Default limit on one event's serialized payload.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Which database a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        })
    }
}

/// A parsed database location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// `sqlite://PATH` or `sqlite:PATH`.
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…`, kept verbatim for the driver.
    Postgres(String),
}

impl DatabaseUrl {
    /// Parses a `DATABASE_URL`-style string, naming the problem when it is unusable.
    pub fn parse(url: &str) -> Result<Self> {
        let url = url.trim();
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() || path == ":memory:" {
                return Err(Error::Config(
                    "an sqlite URL needs a file path (sqlite://PATH); in-memory databases are not durable"
                        .into(),
                ));
            }
            return Ok(DatabaseUrl::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let parsed = url::Url::parse(url)
                .map_err(|e| Error::Config(format!("malformed PostgreSQL URL: {e}")))?;
            if parsed.host_str().is_none_or(str::is_empty) && !url.contains("host=") {
                return Err(Error::Config("the PostgreSQL URL has no host".into()));
            }
            return Ok(DatabaseUrl::Postgres(url.to_string()));
        }
        let scheme = url.split(':').next().unwrap_or_default();
        Err(Error::Config(format!(
            "unsupported database URL scheme `{scheme}` (expected postgres://, postgresql:// or sqlite://)"
        )))
    }

    pub fn backend(&self) -> Backend {
        match self {
            DatabaseUrl::Sqlite(_) => Backend::Sqlite,
            DatabaseUrl::Postgres(_) => Backend::Postgres,
        }
    }

    /// The URL with any password replaced, safe for logs and error messages.
    pub fn redacted(&self) -> String {
        match self {
            DatabaseUrl::Sqlite(path) => format!("sqlite://{}", path.display()),
            DatabaseUrl::Postgres(url) => redact_url(url),
        }
    }
}

/// Replaces the password of a URL with `***`.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(_) => url.to_string(),
        Err(_) => "<unparseable URL>".to_string(),
    }
}

/// The PostgreSQL journal committer's writers by default.
pub const DEFAULT_JOURNAL_WRITERS: usize = 2;

/// How to open a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub url: DatabaseUrl,
    /// Largest serialized payload of one event.
    pub max_event_bytes: usize,
    /// Connections for reads and non-journal writes (PostgreSQL; SQLite readers).
    pub max_connections: u32,
    pub connect_timeout: Duration,
    /// Largest number of events one group commit carries.
    pub max_batch_events: usize,
    /// Run pending migrations while opening.
    pub run_migrations: bool,
    /// How far this node's clock is off (zero in production). Only tests set it, to show that
    /// leases on PostgreSQL are judged by the database's clock: a node whose clock runs ahead
    /// must not take a live lease.
    pub clock_skew: chrono::Duration,
    /// The most pages the SQLite database may grow to (`PRAGMA max_page_count` on the writer;
    /// `None` in production). Tests set it to run a database out of space without a small
    /// filesystem: writes beyond it fail as on a full disk (`SQLITE_FULL`).
    pub sqlite_max_pages: Option<u32>,
    /// PostgreSQL: the journal committer's writers, each with a connection of its own (two by
    /// default: one batch is written while the next is cut; docs/persistence.md, "Group
    /// commit"). SQLite always has one.
    pub journal_writers: usize,
}

impl StoreOptions {
    pub fn new(url: DatabaseUrl) -> Self {
        StoreOptions {
            url,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            max_connections: 8,
            connect_timeout: Duration::from_secs(5),
            max_batch_events: 4096,
            run_migrations: true,
            clock_skew: chrono::Duration::zero(),
            sqlite_max_pages: None,
            journal_writers: DEFAULT_JOURNAL_WRITERS,
        }
    }
}

/// What a migration run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// Versions applied by this run, in order.
    pub applied: Vec<i64>,
    /// The newest version in the database afterwards.
    pub current: Option<i64>,
}

impl MigrationReport {
    /// The report for a run that found `before` applied and left `after`.
    pub(crate) fn between(before: &[i64], after: &[i64]) -> Self {
        MigrationReport {
            applied: after
                .iter()
                .filter(|v| !before.contains(v))
                .copied()
                .collect(),
            current: after.iter().max().copied(),
        }
    }
}

/// Opens the store `options.url` names (running migrations when asked).
pub async fn open(options: StoreOptions) -> Result<Arc<dyn JournalStore>> {
    let store: Arc<dyn JournalStore> = match &options.url {
        DatabaseUrl::Sqlite(_) => Arc::new(store::sqlite::open(&options).await?),
        DatabaseUrl::Postgres(_) => Arc::new(store::postgres::open(&options).await?),
    };
    if options.run_migrations {
        store.migrate().await?;
    }
    Ok(store)
}

/// Why `session` cannot be compacted through `through_seq` (the store found it so).
pub(crate) fn not_compactable(session: &Session, through_seq: i64) -> Error {
    if matches!(
        session.status,
        SessionStatus::Closed | SessionStatus::Failed
    ) {
        Error::Conflict {
            session_id: session.id,
            expected: through_seq,
            actual: session.last_seq,
        }
    } else {
        Error::NotCompactable {
            session_id: session.id,
            status: session.status,
        }
    }
}

/// Checks that a payload can be stored on every backend and returns its serialized form.
pub(crate) fn prepare_payload(kind: &str, payload: &Value, limit: usize) -> Result<String> {
    if kind.is_empty() {
        return Err(Error::InvalidInput("event kind must not be empty".into()));
    }
    if contains_nul(payload) {
        return Err(Error::InvalidInput(format!(
            "event of kind `{kind}` contains a NUL character (\\u0000), which PostgreSQL cannot store"
        )));
    }
    let text = serde_json::to_string(payload)
        .map_err(|e| Error::InvalidInput(format!("payload is not serializable: {e}")))?;
    if text.len() > limit {
        return Err(Error::EventTooLarge {
            kind: kind.to_string(),
            size: text.len(),
            limit,
        });
    }
    Ok(text)
}

/// Whether a JSON value holds a NUL character (`\u0000`) anywhere, which no event may (PostgreSQL
/// cannot store it in `jsonb`).
pub fn contains_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(contains_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || contains_nul(v)),
        _ => false,
    }
}

/// Now, to the microsecond: what both backends store, so a row read back equals the row
/// written.
pub fn stored_now() -> chrono::DateTime<chrono::Utc> {
    let now = chrono::Utc::now();
    chrono::DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_parse_by_scheme() {
        assert_eq!(
            DatabaseUrl::parse("sqlite:///var/lib/stead/stead.db").unwrap(),
            DatabaseUrl::Sqlite("/var/lib/stead/stead.db".into())
        );
        assert_eq!(
            DatabaseUrl::parse("sqlite:data/stead.db?mode=rwc").unwrap(),
            DatabaseUrl::Sqlite("data/stead.db".into())
        );
        assert_eq!(
            DatabaseUrl::parse("postgresql://u:p@db:5432/stead")
                .unwrap()
                .backend(),
            Backend::Postgres
        );
        for bad in [
            "mysql://x",
            "sqlite://",
            "sqlite::memory:",
            "postgres://",
            "stead.db",
        ] {
            assert!(
                matches!(DatabaseUrl::parse(bad), Err(Error::Config(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn redaction_hides_only_the_password() {
        assert_eq!(
            redact_url("postgres://stead:hunter2@db:5432/stead?sslmode=require"),
            "postgres://stead:***@db:5432/stead?sslmode=require"
        );
        assert_eq!(redact_url("postgres://db/stead"), "postgres://db/stead");
    }

    #[test]
    fn payload_checks() {
        assert!(prepare_payload("k", &serde_json::json!({"a": 1}), 100).is_ok());
        assert!(matches!(
            prepare_payload("k", &serde_json::json!({"a": "x".repeat(200)}), 100),
            Err(Error::EventTooLarge { .. })
        ));
        assert!(matches!(
            prepare_payload("k", &serde_json::json!({"a\u{0}": 1}), 100),
            Err(Error::InvalidInput(_))
        ));
        assert!(matches!(
            prepare_payload("", &serde_json::json!({}), 100),
            Err(Error::InvalidInput(_))
        ));
    }
}

//! The store's interface, in narrow traits so that each user names only what it uses:
//! [`Sessions`], [`Journal`], [`Leases`], [`Snapshots`], [`Kv`], [`RequestLog`],
//! [`Schedules`], [`Budgets`] and [`Knowledge`]; [`SessionStore`] is what a session actor
//! uses of them; [`JournalStore`] is all of them plus the store's own lifecycle (migrations,
//! readiness, shutdown), as `open` returns it and only the wiring holds it.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use uuid::Uuid;

use stead_model::Epoch;

use crate::request_log;
use crate::{
    Backend, ClusterNode, Compaction, Event, JournalStats, KvEntry, Lease, MigrationReport,
    NewEvent, NewSession, NodeStatus, Result, Session, SessionPage, SessionQuery, SessionStatus,
    Snapshot,
};

/// Durable storage for sessions and their journals. One implementation, written once over a
/// PostgreSQL and an SQLite dialect (`store`); both backends pass the same test suite
/// (`persistence/tests/journal.rs`).
#[async_trait]
pub trait JournalStore:
    SessionStore
    + RequestLog
    + Budgets
    + Knowledge
    + Evals
    + Tenancy
    + Audit
    + Artifacts
    + Send
    + Sync
    + 'static
{
    fn backend(&self) -> Backend;

    /// Checks that the database answers (readiness).
    async fn ping(&self) -> Result<()>;

    /// Applies pending migrations and reports what it did.
    async fn migrate(&self) -> Result<MigrationReport>;

    /// Stops accepting appends, finishes the ones in flight and closes the connections.
    async fn shutdown(&self);
}

/// What the session actors and replay use of the store: sessions and their journals, leases,
/// snapshots, key-value notes and schedule rows. `JournalStore` extends it, so a whole store
/// is one (`Arc<dyn JournalStore>` coerces to `Arc<dyn SessionStore>`).
pub trait SessionStore:
    Sessions + Journal + Leases + Snapshots + Kv + Schedules + Send + Sync + 'static
{
}

impl<T> SessionStore for T where
    T: Sessions + Journal + Leases + Snapshots + Kv + Schedules + Send + Sync + 'static + ?Sized
{
}

/// Evaluation datasets, their cases, runs and results (docs/evals.md).
#[async_trait]
pub trait Evals: Send + Sync {
    /// A new, empty dataset of `project` (names are unique within a project);
    /// [`Error::Exists`] when the name is taken there.
    async fn create_dataset(&self, project: Uuid, name: &str) -> Result<crate::evals::DatasetRow>;

    /// [`Error::NotFound`] when the project has no such dataset.
    async fn get_dataset(&self, project: Uuid, name: &str) -> Result<crate::evals::DatasetRow>;

    /// The project's datasets, by name.
    async fn list_datasets(&self, project: Uuid) -> Result<Vec<crate::evals::DatasetRow>>;

    /// Removes the dataset and its cases (runs and their results stay); whether it existed.
    async fn delete_dataset(&self, project: Uuid, name: &str) -> Result<bool>;

    /// Appends cases (id, body) after the dataset's last, in one transaction, and moves its
    /// version.
    async fn add_cases(
        &self,
        project: Uuid,
        dataset: &str,
        cases: &[(Uuid, Value)],
    ) -> Result<crate::evals::DatasetRow>;

    /// The dataset's cases in order.
    async fn dataset_cases(
        &self,
        project: Uuid,
        dataset: &str,
    ) -> Result<Vec<crate::evals::CaseRow>>;

    async fn create_eval_run(&self, run: &crate::evals::EvalRunRow) -> Result<()>;

    /// Stores a case's result once and counts it in its run (`done`, `passed`).
    async fn put_eval_result(&self, run: Uuid, result: &crate::evals::EvalResultRow) -> Result<()>;

    async fn finish_eval_run(
        &self,
        run: Uuid,
        status: crate::evals::EvalStatus,
        error: Option<String>,
    ) -> Result<()>;

    async fn get_eval_run(&self, run: Uuid) -> Result<crate::evals::EvalRunRow>;

    /// The project's runs, newest first, of one dataset or all.
    async fn list_eval_runs(
        &self,
        project: Uuid,
        dataset: Option<&str>,
        limit: u32,
    ) -> Result<Vec<crate::evals::EvalRunRow>>;

    /// A run's results in case order.
    async fn eval_results(&self, run: Uuid) -> Result<Vec<crate::evals::EvalResultRow>>;

    /// Marks a session as one of a run's: session lists and the approvals inbox leave it out
    /// unless asked for it.
    async fn tag_eval_session(&self, session: Uuid, run: Uuid) -> Result<()>;

    /// Stores a reviewer's rating of a reply.
    async fn add_feedback(&self, feedback: &crate::evals::FeedbackRow) -> Result<()>;

    /// [`Error::NotFound`] when there is no such rating.
    async fn get_feedback(&self, id: Uuid) -> Result<crate::evals::FeedbackRow>;

    /// Ratings, newest first: of one session or all, of one rating or both.
    async fn list_feedback(
        &self,
        scope: crate::Scope,
        session: Option<Uuid>,
        rating: Option<crate::evals::Rating>,
        limit: u32,
    ) -> Result<Vec<crate::evals::FeedbackRow>>;
}

/// Projects and their virtual keys (`crate::tenancy`).
#[async_trait]
pub trait Tenancy: Send + Sync {
    /// A new project; [`Error::Exists`] when the name is taken.
    async fn create_project(&self, name: &str) -> Result<crate::tenancy::ProjectRow>;

    /// By name; [`Error::NotFound`] when there is none.
    async fn project_by_name(&self, name: &str) -> Result<crate::tenancy::ProjectRow>;

    /// Up to `limit` projects (clamped to `1..=MAX_PAGE`) by name, after the name `after`.
    async fn list_projects(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<crate::tenancy::ProjectRow>>;

    /// By id; [`Error::NotFound`] when there is none.
    async fn project_by_id(&self, id: Uuid) -> Result<crate::tenancy::ProjectRow>;

    /// Replaces a project's settings (its budget); [`Error::NotFound`] when there is none.
    async fn set_project_settings(
        &self,
        id: Uuid,
        settings: &serde_json::Value,
    ) -> Result<crate::tenancy::ProjectRow>;

    async fn create_key(&self, key: &crate::tenancy::KeyRow) -> Result<()>;

    /// The key whose secret has this digest (revoked and expired ones too: the caller
    /// decides), or `None`.
    async fn key_by_digest(&self, digest: &str) -> Result<Option<crate::tenancy::KeyRow>>;

    /// A key by its id (revoked and expired ones too), or `None`.
    async fn key_by_id(&self, id: Uuid) -> Result<Option<crate::tenancy::KeyRow>>;

    /// Sets the budget of a live key of `project`; whether there was one.
    async fn set_key_budget(
        &self,
        project: Uuid,
        key: Uuid,
        budget_usd: Option<f64>,
        budget_period_secs: Option<i64>,
    ) -> Result<bool>;

    /// A project's keys, newest first.
    async fn list_keys(&self, project: Uuid) -> Result<Vec<crate::tenancy::KeyRow>>;

    /// Revokes a key of `project`; whether a live key was revoked (another project's key is
    /// not found).
    async fn revoke_key(&self, project: Uuid, key: Uuid) -> Result<bool>;

    /// Replaces a live key of `project` with `new` (its `rotated_from` set to the old key's id)
    /// in one transaction; [`Error::NotFound`] when there is no such live key.
    async fn rotate_key(
        &self,
        project: Uuid,
        key: Uuid,
        new: &crate::tenancy::KeyRow,
    ) -> Result<crate::tenancy::KeyRow>;
}

/// Sessions and their rows: create, read, list, status, close.
#[async_trait]
pub trait Sessions: Send + Sync {
    async fn create_session(&self, new: NewSession) -> Result<Session>;

    async fn get_session(&self, id: Uuid) -> Result<Session>;

    /// Newest first, filtered, keyset-paginated.
    async fn list_sessions(&self, query: &SessionQuery) -> Result<SessionPage>;

    async fn update_status(&self, id: Uuid, status: SessionStatus) -> Result<Session>;

    /// How many sessions have each status (statuses with none are left out).
    async fn count_sessions(&self) -> Result<Vec<(SessionStatus, i64)>>;

    /// Marks the session closed; its journal is kept.
    async fn close_session(&self, id: Uuid) -> Result<Session>;

    /// Moves the session's token to the next generation (every older token stops being
    /// valid) and returns the session as it now is.
    async fn rotate_token(&self, id: Uuid) -> Result<Session>;

    /// Counts one model call (or, with `session`, one child session) against the message
    /// whose turn started at `turn_seq` on top-level session `id`: every descendant of that
    /// message shares the counts, on any node (one atomic statement). A charge for a later
    /// turn than the row's starts both counts again; an earlier one (a straggler of a finished
    /// message) adds to the current counts. Returns the counts with this one. (Journals from
    /// before per-message budgets charge their delegation's row with `turn_seq` 0.)
    async fn charge_delegation(
        &self,
        id: Uuid,
        turn_seq: i64,
        session: bool,
    ) -> Result<crate::DelegationCounts>;

    /// Deletes a session with its journal, snapshot, compaction and storage. Only for undoing
    /// a session that was never complete (an import or fork whose copy failed).
    async fn delete_session(&self, id: Uuid) -> Result<()>;

    /// Hard delete, in one transaction: the session's row, journal, snapshots, compaction, KV
    /// entries and request-log rows. Returns how many events and log rows went.
    async fn purge_session(&self, id: Uuid) -> Result<crate::Purged>;
}

/// The write-ahead journal: fenced, atomic appends and ordered reads.
#[async_trait]
pub trait Journal: Send + Sync {
    /// Appends `events` after `expected_last_seq`, atomically, and returns their seqs
    /// (`expected_last_seq + 1 ..`).
    ///
    /// # Invariant
    /// Returns only after the events are durably committed. On any error nothing was written.
    async fn append(
        &self,
        session_id: Uuid,
        expected_last_seq: i64,
        events: Vec<NewEvent>,
    ) -> Result<Vec<i64>>;

    /// [`Journal::append`] by the holder of the session's lease at `epoch`: refused with
    /// [`Error::Fenced`] when the session's lease epoch is another (docs/architecture.md, invariant 1).
    /// `status`, when given, is written to the session's row in the same transaction (a
    /// `closed` status also sets `closed_at`).
    async fn append_fenced(
        &self,
        session_id: Uuid,
        expected_last_seq: i64,
        epoch: Epoch,
        status: Option<SessionStatus>,
        events: Vec<NewEvent>,
    ) -> Result<Vec<i64>>;

    /// Up to `limit` events with `seq > after_seq`, in seq order.
    async fn read(&self, session_id: Uuid, after_seq: i64, limit: u32) -> Result<Vec<Event>>;

    /// Group-commit counters since the store was opened.
    fn journal_stats(&self) -> JournalStats;
}

/// Leases with a fencing epoch: one live actor per session across nodes.
#[async_trait]
pub trait Leases: Send + Sync {
    /// Takes the session's lease for `owner` until `ttl` from now, when it is free, expired or
    /// already `owner`'s; every acquisition increments the epoch (fencing out any earlier
    /// holder, the same owner's included). [`Error::LeaseHeld`] when another owner holds it.
    async fn acquire_lease(&self, session_id: Uuid, owner: &str, ttl: Duration) -> Result<Lease>;

    /// Extends a held lease; [`Error::Fenced`] when it is no longer `owner`'s at `epoch`.
    async fn renew_lease(
        &self,
        session_id: Uuid,
        owner: &str,
        epoch: Epoch,
        ttl: Duration,
    ) -> Result<Lease>;

    /// Gives the lease up (when still held at `epoch`), so another node may take it at once.
    async fn release_lease(&self, session_id: Uuid, owner: &str, epoch: Epoch) -> Result<()>;

    /// Registers `node` or refreshes its heartbeat (now, on the leases' clock). `false`: the
    /// node id is held by another process (`instance`) — one alive (heartbeat younger than
    /// `ttl`) at another address when starting, or any other one afterwards.
    async fn heartbeat_node(&self, node: &ClusterNode, ttl: Duration) -> Result<bool>;

    /// Every registered node, alive when its heartbeat is younger than `ttl`, with the number
    /// of sessions whose live lease it holds.
    async fn cluster_nodes(&self, ttl: Duration) -> Result<Vec<NodeStatus>>;

    /// The node whose live lease holds the session (`None`: free, expired, or no session).
    async fn lease_holder(&self, session_id: Uuid) -> Result<Option<String>>;

    /// Removes a node that leaves (a drained shutdown), when its row is still this process's.
    async fn leave_cluster(&self, node: &ClusterNode) -> Result<()>;

    /// Up to `limit` running sessions whose lease ran out (their node died mid-turn), oldest
    /// expiry first: a live node's sweep takes them over.
    async fn orphaned_sessions(&self, limit: u32) -> Result<Vec<Uuid>>;
}

/// Snapshots of folded state and compaction of ended sessions' journals.
#[async_trait]
pub trait Snapshots: Send + Sync {
    /// Stores a snapshot unless a newer one (higher seq) is already stored.
    async fn put_snapshot(&self, session_id: Uuid, seq: i64, state: Value) -> Result<()>;

    async fn latest_snapshot(&self, session_id: Uuid) -> Result<Option<Snapshot>>;

    /// Replaces the journal of an ended session up to `through_seq` (its last seq) by `state`
    /// (also written as its snapshot) and `summary`, in one transaction.
    /// [`Error::NotCompactable`] unless the session is closed or failed; [`Error::Conflict`]
    /// when `through_seq` is not its last seq.
    async fn compact(
        &self,
        session_id: Uuid,
        through_seq: i64,
        state: Value,
        summary: Value,
    ) -> Result<Compaction>;

    /// The session's compaction, if its journal was compacted.
    async fn compaction(&self, session_id: Uuid) -> Result<Option<Compaction>>;

    /// Ended (closed or failed) sessions that ended before `before` with events not yet
    /// compacted, oldest first by `(ended_at, id)`, after the position `after` (keyset
    /// paging, so a caller can step past sessions it skipped).
    async fn compaction_candidates(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        after: Option<(chrono::DateTime<chrono::Utc>, Uuid)>,
        limit: u32,
    ) -> Result<Vec<(Uuid, chrono::DateTime<chrono::Utc>)>>;
}

/// Each session's durable key–value storage (the `memory` tool).
#[async_trait]
pub trait Kv: Send + Sync {
    async fn kv_get(&self, session_id: Uuid, key: &str) -> Result<Option<KvEntry>>;

    async fn kv_set(&self, session_id: Uuid, key: &str, value: Value) -> Result<KvEntry>;

    /// Returns whether the key existed.
    async fn kv_delete(&self, session_id: Uuid, key: &str) -> Result<bool>;

    /// Entries whose key starts with `prefix`, in key order.
    async fn kv_list(&self, session_id: Uuid, prefix: &str) -> Result<Vec<KvEntry>>;
}

/// The model router's request log.
#[async_trait]
pub trait RequestLog: Send + Sync {
    /// Appends request-log rows (one batch, one transaction).
    async fn insert_request_log(&self, entries: &[request_log::RequestLogEntry]) -> Result<()>;

    /// Request-log rows, newest first, filtered, keyset-paginated by id.
    async fn list_request_log(
        &self,
        query: &request_log::RequestLogQuery,
    ) -> Result<request_log::RequestLogPage>;

    /// Figures per group over the rows the query's filters select (its page is ignored).
    async fn request_log_stats(
        &self,
        query: &request_log::RequestLogQuery,
        group_by: &request_log::StatsGroupBy,
    ) -> Result<Vec<request_log::StatsRow>>;

    /// The calls charged within `scope` in `[since, until)` that reached a provider (not
    /// refused by a limit or budget), newest first (at most `MAX_STATS_ROWS`).
    async fn spend_rows(
        &self,
        scope: &request_log::SpendScope,
        since: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<request_log::SpendRow>>;
}

/// Artifacts' rows (`store::artifacts`, docs/artifacts.md): which upload is which blob, of
/// which session. The blobs are the artifact store's (`stead-artifacts`).
#[async_trait]
pub trait Artifacts: Send + Sync {
    /// Records an upload whose blob is stored.
    async fn insert_artifact(&self, artifact: &crate::Artifact) -> Result<()>;

    /// The artifact, or [`crate::Error::NotFound`].
    async fn get_artifact(&self, id: Uuid) -> Result<crate::Artifact>;

    /// A session's artifacts, oldest first.
    async fn session_artifacts(&self, session_id: Uuid) -> Result<Vec<crate::Artifact>>;

    /// Of `sha256s`, those no artifact row names (their blobs may be deleted).
    async fn unreferenced_blobs(&self, sha256s: &[String]) -> Result<Vec<String>>;
}

/// The audit log (`crate::audit`): appended, listed, pruned by retention; never updated.
#[async_trait]
pub trait Audit: Send + Sync {
    async fn append_audit(&self, entry: &crate::audit::AuditEntry) -> Result<()>;

    /// Acts newest first, filtered (a project's scope sees its project's only).
    async fn list_audit(
        &self,
        query: &crate::audit::AuditQuery,
    ) -> Result<Vec<crate::audit::AuditEntry>>;

    /// Removes acts older than `before`; how many went.
    async fn prune_audit(&self, before: chrono::DateTime<chrono::Utc>) -> Result<u64>;
}

/// Strict budgets shared by the nodes of a cluster (`store::budgets`).
#[async_trait]
pub trait Budgets: Send + Sync {
    /// Sets `amount` aside for the key when spent + reserved + amount fits the budget (first
    /// booking as spent the reservations of nodes that are dead or started again since).
    async fn reserve_budget(&self, request: &crate::BudgetRequest)
        -> Result<crate::BudgetDecision>;

    /// Ends a reservation and books what its call really cost; `false` when it was already
    /// booked in full (its node looked dead to another node).
    async fn settle_budget(&self, reservation: Uuid, cost: f64) -> Result<bool>;

    /// Marks `key`'s current window as alerted when it has spent at least `threshold` and was
    /// not marked yet, in one statement: the one caller that marked it gets what was spent and
    /// when the window started; every other gets `None`.
    async fn alert_budget(
        &self,
        key: &str,
        threshold: f64,
    ) -> Result<Option<(f64, chrono::DateTime<chrono::Utc>)>>;

    /// What each of the ledger keys `keys` has spent in its current window, and when that
    /// window started (keys that never spent are absent).
    async fn budget_spending(
        &self,
        keys: &[String],
    ) -> Result<Vec<(String, f64, chrono::DateTime<chrono::Utc>)>>;
}

/// The schedules' due index (`crate::schedules`).
#[async_trait]
pub trait Schedules: Send + Sync {
    /// Writes rows (insert, or replace the row of the same owner and key).
    async fn put_schedules(&self, rows: &[crate::ScheduleRow]) -> Result<()>;

    /// Removes a row; returns whether there was one.
    async fn delete_schedule(&self, owner: &crate::ScheduleOwner, key: &str) -> Result<bool>;

    /// Rows due at or before `now`, earliest first, at most `limit`.
    async fn due_schedules(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        limit: u32,
    ) -> Result<Vec<crate::ScheduleRow>>;

    /// The earliest `next_due_at` of all rows (`None`: there are none).
    async fn next_schedule_due(&self) -> Result<Option<chrono::DateTime<chrono::Utc>>>;

    /// Rows, earliest due first, filtered.
    async fn list_schedules(&self, query: &crate::ScheduleQuery)
        -> Result<Vec<crate::ScheduleRow>>;

    /// Moves an agent's schedule from the occurrence `from` to `to` (`None`: it is done, the
    /// row goes) when its row still says `from`; returns whether this call moved it (a claim:
    /// of several nodes, one wins).
    async fn advance_schedule(
        &self,
        owner: &crate::ScheduleOwner,
        key: &str,
        from: chrono::DateTime<chrono::Utc>,
        to: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<bool>;
}

/// Knowledge collections, documents and chunks (`crate::knowledge`, docs/knowledge.md).
#[async_trait]
pub trait Knowledge: Send + Sync {
    /// Creates the collection; `Ok((row, false))` when it exists with this route already.
    /// One with another route is [`crate::Error::Exists`].
    async fn create_collection(
        &self,
        key: &crate::CollectionKey,
        embedding_route: &str,
    ) -> Result<(crate::CollectionRow, bool)>;

    /// [`crate::Error::NotFound`] when there is none (in that project).
    async fn get_collection(&self, key: &crate::CollectionKey) -> Result<crate::CollectionRow>;

    /// Every collection of the project, by name.
    async fn list_collections(&self, project: Uuid) -> Result<Vec<crate::CollectionRow>>;

    /// Removes the collection with its documents and chunks; whether there was one.
    async fn delete_collection(&self, key: &crate::CollectionKey) -> Result<bool>;

    /// Writes the document in place of any of the same id, in one transaction: the
    /// collection's model is set by its first document, and a document of another model is
    /// [`crate::Error::Mismatch`]. A document whose text and metadata are unchanged is left
    /// alone.
    async fn put_document(&self, put: crate::PutDocument) -> Result<crate::PutOutcome>;

    /// Removes a document and its chunks; whether there was one.
    async fn delete_document(&self, collection: &crate::CollectionKey, id: &str) -> Result<bool>;

    /// Documents by id, after `after`, at most `limit`.
    async fn list_documents(
        &self,
        collection: &crate::CollectionKey,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<crate::DocumentRow>>;

    /// A document with its text and its chunks' texts, in order.
    async fn get_document(
        &self,
        collection: &crate::CollectionKey,
        id: &str,
    ) -> Result<(crate::DocumentRow, String, Vec<String>)>;

    /// Every chunk of the collection with its embedding, as of one version.
    async fn collection_chunks(
        &self,
        collection: &crate::CollectionKey,
    ) -> Result<crate::CollectionChunks>;

    /// Replaces every chunk's embedding and the collection's model, in one transaction, when
    /// the collection is still at `from_version` (else [`crate::Error::Stale`]).
    async fn reembed_collection(&self, reembedding: crate::Reembedding) -> Result<()>;
}

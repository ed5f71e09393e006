//! The store, written once for both backends: [`SqlStore`] holds a [`Dialect`] (PostgreSQL or
//! SQLite) and the group committer that owns journal writes, and implements [`JournalStore`]
//! with SQL both databases understand. What really differs — encodings, connections, pragmas,
//! migrations, the set-based journal writes, a few expressions — is in `postgres.rs` and
//! `sqlite.rs`.

mod artifacts;
mod audit;
mod budgets;
mod cluster;
mod compaction;
mod dialect;
mod evals;
mod knowledge;
mod kv;
mod leases;
pub(crate) mod postgres;
mod removal;
mod request_log;
mod rows;
mod schedules;
pub(crate) mod sqlite;
mod sqlite_journal;
mod tenancy;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use self::dialect::{Arg, Columns, Dialect, On, Sql};
use self::rows::SESSION_COLUMNS;
use stead_model::Epoch;

use crate::group_commit::{AppendRequest, GroupCommit, Outcome};
use crate::request_log::{
    RequestLogEntry, RequestLogPage, RequestLogQuery, StatsGroupBy, StatsRow,
};
use crate::types::{into_page, now_micros};
use crate::{
    Backend, Compaction, Error, Event, Journal, JournalStats, JournalStore, Lease, Leases,
    MigrationReport, NewEvent, NewSession, RequestLog, Result, Session, SessionPage, SessionQuery,
    SessionStatus, Sessions, Snapshot, Snapshots,
};

/// Sessions, journal, snapshots, compactions, key–value storage and the request log on the
/// database of dialect `D`.
pub(crate) struct SqlStore<D: Dialect> {
    db: D,
    journal: GroupCommit,
    /// Added to this node's clock where it judges leases (`StoreOptions::clock_skew`).
    clock_skew: chrono::Duration,
}

impl<D: Dialect> SqlStore<D> {
    pub(crate) fn new(db: D, journal: GroupCommit) -> Self {
        SqlStore {
            db,
            journal,
            clock_skew: chrono::Duration::zero(),
        }
    }

    pub(crate) fn with_clock_skew(mut self, skew: chrono::Duration) -> Self {
        self.clock_skew = skew;
        self
    }

    /// Statements that only read run on the readers.
    fn on_read(&self) -> On<'_, D::Db> {
        On::Pool(self.db.reader())
    }

    /// Statements that write run on the writer.
    fn on_write(&self) -> On<'_, D::Db> {
        On::Pool(self.db.writer())
    }

    async fn fetch_session(&self, id: Uuid) -> Result<Session> {
        Sql::<D>::new(format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = "
        ))
        .bind(id)
        .fetch_optional(self.on_read())
        .await?
        .map(|row| rows::session(&row))
        .transpose()?
        .ok_or(Error::SessionNotFound(id))
    }

    async fn require_session(&self, id: Uuid) -> Result<()> {
        let found = Sql::<D>::new("SELECT 1 FROM sessions WHERE id = ")
            .bind(id)
            .fetch_optional(self.on_read())
            .await?;
        found.map(|_| ()).ok_or(Error::SessionNotFound(id))
    }

    /// Runs a statement that changes the session `id`'s row, then reads the row back.
    async fn update_session(&self, id: Uuid, mut update: Sql<D>) -> Result<Session> {
        if update.execute(self.on_write()).await? == 0 {
            return Err(Error::SessionNotFound(id));
        }
        self.fetch_session(id).await
    }

    /// `row` decoded; when there is none, `None` if the session exists (else `SessionNotFound`).
    async fn found_or_none<T, R>(
        &self,
        session_id: Uuid,
        row: Option<R>,
        decode: impl FnOnce(&R) -> Result<T>,
    ) -> Result<Option<T>> {
        match row {
            None => {
                self.require_session(session_id).await?;
                Ok(None)
            }
            Some(row) => decode(&row).map(Some),
        }
    }
}

/// The outcome of a request its fenced update did not admit, from the session's
/// `(last_seq, lease_epoch)` as found (`None`: no such session).
pub(crate) fn rejected(request: &AppendRequest, found: Option<(i64, i64)>) -> Outcome {
    match found {
        Some((_, current)) if request.epoch.is_some_and(|e| e.0 != current) => Outcome::Fenced {
            current: Epoch(current),
        },
        Some((actual, _)) => Outcome::Conflict { actual },
        None => Outcome::NotFound,
    }
}

#[async_trait]
impl<D: Dialect> JournalStore for SqlStore<D> {
    fn backend(&self) -> Backend {
        D::BACKEND
    }

    async fn ping(&self) -> Result<()> {
        Sql::<D>::new("SELECT 1").execute(self.on_read()).await?;
        Ok(())
    }

    async fn migrate(&self) -> Result<MigrationReport> {
        let before = self.db.applied_migrations().await?;
        self.db.run_migrations().await?;
        let after = self.db.applied_migrations().await?;
        Ok(MigrationReport::between(&before, &after))
    }

    async fn shutdown(&self) {
        self.journal.shutdown().await;
        self.db.close().await;
    }
}

#[async_trait]
impl<D: Dialect> Sessions for SqlStore<D> {
    async fn create_session(&self, new: NewSession) -> Result<Session> {
        let mut session = Session::new_idle(new);
        let now = session.created_at;
        let parent = session.parent.as_ref().map(|p| p.session_id);
        // A child session joins its parent's project and evaluation run, if any.
        Sql::<D>::new(
            "INSERT INTO sessions (id, agent, status, metadata, last_seq, created_at, \
             updated_at, parent_session_id, parent_call_id, eval_run, project_id) VALUES (",
        )
        .bind(session.id)
        .push(", ")
        .bind(session.agent.as_str())
        .push(", ")
        .bind(session.status.as_str())
        .push(", ")
        .bind(&session.metadata)
        .push(", 0, ")
        .bind(now)
        .push(", ")
        .bind(now)
        .push(", ")
        .bind(session.parent.as_ref().map(|p| p.session_id))
        .push(", ")
        .bind(session.parent.as_ref().map(|p| p.call_id.to_string()))
        .push(", (SELECT eval_run FROM sessions WHERE id = ")
        .bind(parent)
        .push("), COALESCE((SELECT project_id FROM sessions WHERE id = ")
        .bind(parent)
        .push("), ")
        .bind(session.project_id)
        .push("))")
        .execute(self.on_write())
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                Error::InvalidInput(format!("session {} already exists", session.id))
            }
            _ => Error::Database(e),
        })?;
        if let Some(parent) = parent {
            session.project_id = self.fetch_session(parent).await?.project_id;
        }
        Ok(session)
    }

    async fn get_session(&self, id: Uuid) -> Result<Session> {
        self.fetch_session(id).await
    }

    async fn list_sessions(&self, query: &SessionQuery) -> Result<SessionPage> {
        let limit = query.page_size();
        let cursor = query.decoded_cursor()?;
        let mut sql = Sql::<D>::new(format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE TRUE"));
        if let Some(project) = query.scope.project() {
            sql.push(" AND project_id = ").bind(project);
        }
        if let Some(agent) = &query.agent {
            sql.push(" AND agent = ").bind(agent.as_str());
        }
        if let Some(parent) = query.parent {
            sql.push(" AND parent_session_id = ").bind(parent);
        }
        if let Some(status) = query.status {
            sql.push(" AND status = ").bind(status.as_str());
        }
        match query.eval_run {
            Some(run) => sql.push(" AND eval_run = ").bind(run),
            None => sql.push(" AND eval_run IS NULL"),
        };
        if let Some(cursor) = cursor {
            sql.push(" AND (created_at, id) < (")
                .bind(Arg::Micros(cursor.created_at_us))
                .push(", ")
                .bind(cursor.id)
                .push(")");
        }
        sql.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .bind(i64::from(limit) + 1);
        let rows = sql.fetch_all(self.on_read()).await?;
        let sessions = rows.iter().map(rows::session).collect::<Result<Vec<_>>>()?;
        Ok(into_page(sessions, limit))
    }

    async fn update_status(&self, id: Uuid, status: SessionStatus) -> Result<Session> {
        let now = now_micros();
        let mut update = Sql::new("UPDATE sessions SET status = ");
        update
            .bind(status.as_str())
            .push(", updated_at = ")
            .bind(now);
        if matches!(status, SessionStatus::Closed | SessionStatus::Failed) {
            update.push(", ended_at = ").bind(now);
        }
        update.push(" WHERE id = ").bind(id);
        self.update_session(id, update).await
    }

    async fn count_sessions(&self) -> Result<Vec<(SessionStatus, i64)>> {
        let rows = Sql::<D>::new("SELECT status, COUNT(*) AS n FROM sessions GROUP BY status")
            .fetch_all(self.on_read())
            .await?;
        rows.iter()
            .map(|row| Ok((row.text("status")?.parse()?, row.int("n")?)))
            .collect()
    }

    async fn close_session(&self, id: Uuid) -> Result<Session> {
        let now = now_micros();
        let mut update = Sql::new("UPDATE sessions SET status = 'closed', updated_at = ");
        update
            .bind(now)
            .push(", closed_at = COALESCE(closed_at, ")
            .bind(now)
            .push("), ended_at = COALESCE(ended_at, ")
            .bind(now)
            .push(") WHERE id = ")
            .bind(id);
        self.update_session(id, update).await
    }

    async fn rotate_token(&self, id: Uuid) -> Result<Session> {
        let mut update =
            Sql::new("UPDATE sessions SET token_generation = token_generation + 1 WHERE id = ");
        update.bind(id);
        self.update_session(id, update).await
    }

    async fn charge_delegation(
        &self,
        id: Uuid,
        turn_seq: i64,
        session: bool,
    ) -> Result<crate::DelegationCounts> {
        let (step, child): (i64, i64) = if session { (0, 1) } else { (1, 0) };
        let mut update =
            Sql::<D>::new("UPDATE sessions SET delegation_steps = CASE WHEN delegation_turn < ");
        update
            .bind(turn_seq)
            .push(" THEN ")
            .bind(step)
            .push(" ELSE delegation_steps + ")
            .bind(step)
            .push(" END, delegation_sessions = CASE WHEN delegation_turn < ")
            .bind(turn_seq)
            .push(" THEN ")
            .bind(child)
            .push(" ELSE delegation_sessions + ")
            .bind(child)
            .push(" END, delegation_turn = CASE WHEN delegation_turn < ")
            .bind(turn_seq)
            .push(" THEN ")
            .bind(turn_seq)
            .push(" ELSE delegation_turn END WHERE id = ")
            .bind(id)
            .push(" RETURNING delegation_steps, delegation_sessions");
        let row = update.fetch_optional(self.on_write()).await?;
        match row {
            Some(row) => Ok(crate::DelegationCounts {
                model_calls: row.int("delegation_steps")?,
                sessions: row.int("delegation_sessions")?,
            }),
            None => Err(Error::SessionNotFound(id)),
        }
    }

    async fn purge_session(&self, id: Uuid) -> Result<crate::Purged> {
        removal::purge::<D>(self.db.writer(), id).await
    }

    async fn delete_session(&self, id: Uuid) -> Result<()> {
        removal::delete::<D>(self.db.writer(), id).await
    }
}

#[async_trait]
impl<D: Dialect> Journal for SqlStore<D> {
    async fn append(
        &self,
        session_id: Uuid,
        expected_last_seq: i64,
        events: Vec<NewEvent>,
    ) -> Result<Vec<i64>> {
        self.journal
            .append(session_id, expected_last_seq, None, None, events)
            .await
    }

    async fn append_fenced(
        &self,
        session_id: Uuid,
        expected_last_seq: i64,
        epoch: Epoch,
        status: Option<SessionStatus>,
        events: Vec<NewEvent>,
    ) -> Result<Vec<i64>> {
        self.journal
            .append(session_id, expected_last_seq, Some(epoch), status, events)
            .await
    }

    async fn read(&self, session_id: Uuid, after_seq: i64, limit: u32) -> Result<Vec<Event>> {
        let rows =
            Sql::<D>::new("SELECT seq, kind, payload, created_at FROM journal WHERE session_id = ")
                .bind(session_id)
                .push(" AND seq > ")
                .bind(after_seq)
                .push(" ORDER BY seq LIMIT ")
                .bind(i64::from(limit))
                .fetch_all(self.on_read())
                .await?;
        if rows.is_empty() {
            self.require_session(session_id).await?;
        }
        rows.iter()
            .map(|row| rows::event(session_id, row))
            .collect()
    }

    fn journal_stats(&self) -> JournalStats {
        self.journal.stats()
    }
}

#[async_trait]
impl<D: Dialect> Leases for SqlStore<D> {
    async fn acquire_lease(&self, session_id: Uuid, owner: &str, ttl: Duration) -> Result<Lease> {
        self.acquire(session_id, owner, ttl).await
    }

    async fn renew_lease(
        &self,
        session_id: Uuid,
        owner: &str,
        epoch: Epoch,
        ttl: Duration,
    ) -> Result<Lease> {
        self.renew(session_id, owner, epoch, ttl).await
    }

    async fn heartbeat_node(&self, node: &crate::ClusterNode, ttl: Duration) -> Result<bool> {
        self.heartbeat(node, ttl).await
    }

    async fn cluster_nodes(&self, ttl: Duration) -> Result<Vec<crate::NodeStatus>> {
        self.nodes(ttl).await
    }

    async fn lease_holder(&self, session_id: Uuid) -> Result<Option<String>> {
        self.holder(session_id).await
    }

    async fn leave_cluster(&self, node: &crate::ClusterNode) -> Result<()> {
        self.leave(node).await
    }

    async fn orphaned_sessions(&self, limit: u32) -> Result<Vec<Uuid>> {
        self.orphans(limit).await
    }

    async fn release_lease(&self, session_id: Uuid, owner: &str, epoch: Epoch) -> Result<()> {
        self.release(session_id, owner, epoch).await
    }
}

#[async_trait]
impl<D: Dialect> Snapshots for SqlStore<D> {
    async fn put_snapshot(&self, session_id: Uuid, seq: i64, state: Value) -> Result<()> {
        self.require_session(session_id).await?;
        Sql::<D>::new("INSERT INTO snapshots (session_id, seq, state, created_at) VALUES (")
            .bind(session_id)
            .push(", ")
            .bind(seq)
            .push(", ")
            .bind(state)
            .push(", ")
            .bind(now_micros())
            .push(
                ") ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, \
                 state = excluded.state, created_at = excluded.created_at \
                 WHERE excluded.seq >= snapshots.seq",
            )
            .execute(self.on_write())
            .await?;
        Ok(())
    }

    async fn latest_snapshot(&self, session_id: Uuid) -> Result<Option<Snapshot>> {
        let row = Sql::<D>::new("SELECT seq, state, created_at FROM snapshots WHERE session_id = ")
            .bind(session_id)
            .fetch_optional(self.on_read())
            .await?;
        self.found_or_none(session_id, row, |row| rows::snapshot(session_id, row))
            .await
    }

    async fn compact(
        &self,
        session_id: Uuid,
        through_seq: i64,
        state: Value,
        summary: Value,
    ) -> Result<Compaction> {
        self.compact_ended(session_id, through_seq, state, summary)
            .await
    }

    async fn compaction(&self, session_id: Uuid) -> Result<Option<Compaction>> {
        let row = Sql::<D>::new(
            "SELECT through_seq, state, summary, compacted_at FROM journal_compactions \
             WHERE session_id = ",
        )
        .bind(session_id)
        .fetch_optional(self.on_read())
        .await?;
        self.found_or_none(session_id, row, |row| rows::compaction(session_id, row))
            .await
    }

    async fn compaction_candidates(
        &self,
        before: DateTime<Utc>,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: u32,
    ) -> Result<Vec<(Uuid, DateTime<Utc>)>> {
        self.candidates(before, after, limit).await
    }
}

#[async_trait]
impl<D: Dialect> crate::Budgets for SqlStore<D> {
    async fn reserve_budget(
        &self,
        request: &crate::BudgetRequest,
    ) -> Result<crate::BudgetDecision> {
        self.reserve(request).await
    }

    async fn settle_budget(&self, reservation: Uuid, cost: f64) -> Result<bool> {
        self.settle(reservation, cost).await
    }

    async fn budget_spending(&self, keys: &[String]) -> Result<Vec<(String, f64, DateTime<Utc>)>> {
        self.spending(keys).await
    }

    async fn alert_budget(
        &self,
        key: &str,
        threshold: f64,
    ) -> Result<Option<(f64, DateTime<Utc>)>> {
        self.alert(key, threshold).await
    }
}

#[async_trait]
impl<D: Dialect> RequestLog for SqlStore<D> {
    async fn insert_request_log(&self, entries: &[RequestLogEntry]) -> Result<()> {
        self.insert_log(entries).await
    }

    async fn list_request_log(&self, query: &RequestLogQuery) -> Result<RequestLogPage> {
        self.list_log(query).await
    }

    async fn request_log_stats(
        &self,
        query: &RequestLogQuery,
        group_by: &StatsGroupBy,
    ) -> Result<Vec<StatsRow>> {
        self.log_stats(query, group_by).await
    }

    async fn spend_rows(
        &self,
        scope: &crate::request_log::SpendScope,
        since: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<crate::request_log::SpendRow>> {
        self.log_spend(scope, since, until).await
    }
}

//! The PostgreSQL backend: ids as `uuid`, times as `timestamptz`, JSON as `jsonb`.
//!
//! A group commit writes each round of a batch (each session at most once per round) with one
//! set-based statement: a fenced `UPDATE sessions … WHERE last_seq = expected` whose returned
//! ids gate the `INSERT INTO journal`, all rounds inside one transaction, so a batch costs one
//! commit (one WAL flush) whatever its size. The conditional update also fences writers in
//! other processes: a concurrent transaction blocks on the row lock, re-checks `last_seq` after
//! the first commits and updates nothing.

use std::collections::HashSet;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions, Connection, Postgres, QueryBuilder, Row};
use uuid::Uuid;

use crate::group_commit::{rounds, AppendRequest, BatchWriter, GroupCommit, Outcome};
use crate::request_log::{
    compute_stats, into_log_page, RequestLogEntry, RequestLogPage, RequestLogQuery, StatsGroupBy,
    StatsInput, StatsRow, LOG_ROWS_PER_STATEMENT, MAX_STATS_ROWS,
};
use crate::types::{into_page, now_micros};
use crate::{
    redact_url, Backend, Compaction, DatabaseUrl, Error, Event, JournalStore, KvEntry, Lease,
    MigrationReport, NewEvent, NewSession, Result, Session, SessionPage, SessionQuery,
    SessionStatus, Snapshot, StoreOptions,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

const SESSION_COLUMNS: &str =
    "id, agent, status, metadata, last_seq, created_at, updated_at, closed_at";

const FENCED_APPEND: &str = "
WITH req AS (
    SELECT * FROM unnest($1::uuid[], $2::int8[], $3::int8[], $10::int8[], $11::text[])
        AS r(session_id, expected, new_last, epoch, status)
), upd AS (
    UPDATE sessions s SET last_seq = req.new_last, updated_at = $4,
        status = COALESCE(req.status, s.status),
        closed_at = CASE WHEN req.status = 'closed' THEN $4 ELSE s.closed_at END
    FROM req WHERE s.id = req.session_id AND s.last_seq = req.expected
        AND (req.epoch < 0 OR s.lease_epoch = req.epoch)
    RETURNING s.id
), ins AS (
    INSERT INTO journal (session_id, seq, kind, payload, created_at)
    SELECT e.session_id, e.seq, e.kind, e.payload::jsonb, e.created_at
    FROM unnest($5::uuid[], $6::int8[], $7::text[], $8::text[], $9::timestamptz[])
        AS e(session_id, seq, kind, payload, created_at)
    WHERE e.session_id IN (SELECT id FROM upd)
)
SELECT id FROM upd";

pub struct PgStore {
    pool: PgPool,
    journal: GroupCommit,
}

impl PgStore {
    pub async fn open(options: &StoreOptions) -> Result<Self> {
        let DatabaseUrl::Postgres(url) = &options.url else {
            return Err(Error::Config("not a PostgreSQL URL".into()));
        };
        let connect = PgConnectOptions::from_str(url)
            .map_err(|e| Error::Config(format!("malformed PostgreSQL URL: {e}")))?
            .application_name(&crate::scratch::application_name());
        // One direct connection first, so that an unreachable server or a refused login is
        // reported as such rather than as a pool timeout.
        let probe = tokio::time::timeout(options.connect_timeout, connect.connect()).await;
        let where_ = redact_url(url);
        match probe {
            Err(_) => {
                return Err(Error::Config(format!(
                    "cannot connect to PostgreSQL at {where_}: no answer within {:?}",
                    options.connect_timeout
                )))
            }
            Ok(Err(e)) => {
                return Err(Error::Config(format!(
                    "cannot connect to PostgreSQL at {where_}: {e}"
                )))
            }
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
            }
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .acquire_timeout(
                options
                    .connect_timeout
                    .max(std::time::Duration::from_secs(30)),
            )
            .connect_with(connect)
            .await?;
        let journal = GroupCommit::start(
            PgBatchWriter { pool: pool.clone() },
            options.max_event_bytes,
            options.max_batch_events,
        );
        Ok(PgStore { pool, journal })
    }

    async fn fetch_session(&self, id: Uuid) -> Result<Session> {
        let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1");
        sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .map(|row| session_from_row(&row))
            .transpose()?
            .ok_or(Error::SessionNotFound(id))
    }

    async fn require_session(&self, id: Uuid) -> Result<()> {
        let found = sqlx::query("SELECT 1 FROM sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        found.map(|_| ()).ok_or(Error::SessionNotFound(id))
    }
}

const LOG_COLUMNS: &str = "id, at, session_id, api_key, route, provider, model, status, attempts, \
     latency_ms, ttft_ms, tokens_in, tokens_out, cost, cache_hit, stream, metadata, error";

/// The filters of a request-log query.
fn push_log_filters(sql: &mut QueryBuilder<'_, Postgres>, query: &RequestLogQuery) -> Result<()> {
    for (column, value) in [
        ("route", &query.route),
        ("provider", &query.provider),
        ("model", &query.model),
        ("status", &query.status),
        ("api_key", &query.api_key),
    ] {
        if let Some(value) = value {
            sql.push(format!(" AND {column} = "))
                .push_bind(value.clone());
        }
    }
    if let Some(session) = query.session_id {
        sql.push(" AND session_id = ").push_bind(session);
    }
    if let Some(hit) = query.cache_hit {
        sql.push(" AND cache_hit = ").push_bind(hit);
    }
    if let Some(since) = query.since {
        sql.push(" AND at >= ").push_bind(since);
    }
    if let Some(until) = query.until {
        sql.push(" AND at < ").push_bind(until);
    }
    if let Some((key, value)) = &query.metadata {
        sql.push(" AND metadata ->> ")
            .push_bind(RequestLogQuery::metadata_key(key)?.to_string())
            .push(" = ")
            .push_bind(value.clone());
    }
    Ok(())
}

fn log_from_row(row: &PgRow) -> Result<RequestLogEntry> {
    Ok(RequestLogEntry {
        id: row.try_get("id")?,
        at: row.try_get("at")?,
        session_id: row.try_get("session_id")?,
        api_key: row.try_get("api_key")?,
        route: row.try_get("route")?,
        provider: row.try_get("provider")?,
        model: row.try_get("model")?,
        status: row.try_get("status")?,
        attempts: row.try_get("attempts")?,
        latency_ms: row.try_get("latency_ms")?,
        ttft_ms: row.try_get("ttft_ms")?,
        tokens_in: row.try_get("tokens_in")?,
        tokens_out: row.try_get("tokens_out")?,
        cost: row.try_get("cost")?,
        cache_hit: row.try_get("cache_hit")?,
        stream: row.try_get("stream")?,
        metadata: row.try_get("metadata")?,
        error: row.try_get("error")?,
    })
}

fn session_from_row(row: &PgRow) -> Result<Session> {
    let status: String = row.try_get("status")?;
    Ok(Session {
        id: row.try_get("id")?,
        agent: row.try_get("agent")?,
        status: SessionStatus::from_str(&status)?,
        metadata: row.try_get("metadata")?,
        last_seq: row.try_get("last_seq")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        closed_at: row.try_get("closed_at")?,
    })
}

fn kv_from_row(row: &PgRow) -> Result<KvEntry> {
    Ok(KvEntry {
        key: row.try_get("key")?,
        value: row.try_get("value")?,
        updated_at: row.try_get("updated_at")?,
    })
}

#[async_trait]
impl JournalStore for PgStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn migrate(&self) -> Result<MigrationReport> {
        let before = applied_versions(&mut *self.pool.acquire().await?).await?;
        MIGRATOR.run(&self.pool).await?;
        let after = applied_versions(&mut *self.pool.acquire().await?).await?;
        Ok(MigrationReport::between(&before, &after))
    }

    async fn create_session(&self, new: NewSession) -> Result<Session> {
        let session = Session::new_idle(new);
        let now = session.created_at;
        sqlx::query(
            "INSERT INTO sessions (id, agent, status, metadata, last_seq, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, 0, $5, $5)",
        )
        .bind(session.id)
        .bind(&session.agent)
        .bind(session.status.as_str())
        .bind(&session.metadata)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                Error::InvalidInput(format!("session {} already exists", session.id))
            }
            _ => Error::Database(e),
        })?;
        Ok(session)
    }

    async fn get_session(&self, id: Uuid) -> Result<Session> {
        self.fetch_session(id).await
    }

    async fn list_sessions(&self, query: &SessionQuery) -> Result<SessionPage> {
        let limit = query.page_size();
        let cursor = query.decoded_cursor()?;
        let mut sql = QueryBuilder::<Postgres>::new(format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE TRUE"
        ));
        if let Some(agent) = &query.agent {
            sql.push(" AND agent = ").push_bind(agent.clone());
        }
        if let Some(status) = query.status {
            sql.push(" AND status = ").push_bind(status.as_str());
        }
        if let Some(cursor) = cursor {
            let at: DateTime<Utc> = crate::types::micros_to_time(cursor.created_at_us);
            sql.push(" AND (created_at, id) < (")
                .push_bind(at)
                .push(", ")
                .push_bind(cursor.id)
                .push(")");
        }
        sql.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .push_bind(i64::from(limit) + 1);
        let rows = sql.build().fetch_all(&self.pool).await?;
        let sessions = rows
            .iter()
            .map(session_from_row)
            .collect::<Result<Vec<_>>>()?;
        Ok(into_page(sessions, limit))
    }

    async fn count_sessions(&self) -> Result<Vec<(SessionStatus, i64)>> {
        let rows = sqlx::query("SELECT status, COUNT(*) AS n FROM sessions GROUP BY status")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let status: String = row.try_get("status")?;
                Ok((status.parse()?, row.try_get("n")?))
            })
            .collect()
    }

    async fn update_status(&self, id: Uuid, status: SessionStatus) -> Result<Session> {
        let done = sqlx::query("UPDATE sessions SET status = $1, updated_at = $2 WHERE id = $3")
            .bind(status.as_str())
            .bind(now_micros())
            .bind(id)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(Error::SessionNotFound(id));
        }
        self.fetch_session(id).await
    }

    async fn close_session(&self, id: Uuid) -> Result<Session> {
        let done = sqlx::query(
            "UPDATE sessions SET status = 'closed', updated_at = $1, \
             closed_at = COALESCE(closed_at, $1) WHERE id = $2",
        )
        .bind(now_micros())
        .bind(id)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(Error::SessionNotFound(id));
        }
        self.fetch_session(id).await
    }

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
        epoch: i64,
        status: Option<SessionStatus>,
        events: Vec<NewEvent>,
    ) -> Result<Vec<i64>> {
        self.journal
            .append(session_id, expected_last_seq, Some(epoch), status, events)
            .await
    }

    async fn acquire_lease(&self, session_id: Uuid, owner: &str, ttl: Duration) -> Result<Lease> {
        let now = now_micros();
        let until = now + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX);
        let epoch: Option<i64> = sqlx::query_scalar(
            "UPDATE sessions SET lease_owner = $1, lease_epoch = lease_epoch + 1, \
             lease_expires_at = $2 WHERE id = $3 AND \
             (lease_owner IS NULL OR lease_owner = $1 OR lease_expires_at < $4) \
             RETURNING lease_epoch",
        )
        .bind(owner)
        .bind(until)
        .bind(session_id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(epoch) = epoch {
            return Ok(Lease {
                owner: owner.to_string(),
                epoch,
                expires_at: until,
            });
        }
        let holder: Option<(Option<String>, DateTime<Utc>)> =
            sqlx::query_as("SELECT lease_owner, lease_expires_at FROM sessions WHERE id = $1")
                .bind(session_id)
                .fetch_optional(&self.pool)
                .await?;
        match holder {
            Some((holder, until)) => Err(Error::LeaseHeld {
                session_id,
                owner: holder.unwrap_or_default(),
                until,
            }),
            None => Err(Error::SessionNotFound(session_id)),
        }
    }

    async fn renew_lease(
        &self,
        session_id: Uuid,
        owner: &str,
        epoch: i64,
        ttl: Duration,
    ) -> Result<Lease> {
        let until = now_micros() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX);
        let done = sqlx::query(
            "UPDATE sessions SET lease_expires_at = $1 \
             WHERE id = $2 AND lease_owner = $3 AND lease_epoch = $4",
        )
        .bind(until)
        .bind(session_id)
        .bind(owner)
        .bind(epoch)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(Lease {
                owner: owner.to_string(),
                epoch,
                expires_at: until,
            });
        }
        let current: Option<i64> =
            sqlx::query_scalar("SELECT lease_epoch FROM sessions WHERE id = $1")
                .bind(session_id)
                .fetch_optional(&self.pool)
                .await?;
        match current {
            Some(current) => Err(Error::Fenced {
                session_id,
                held: epoch,
                current,
            }),
            None => Err(Error::SessionNotFound(session_id)),
        }
    }

    async fn release_lease(&self, session_id: Uuid, owner: &str, epoch: i64) -> Result<()> {
        sqlx::query(
            "UPDATE sessions SET lease_owner = NULL, lease_expires_at = 'epoch' \
             WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3",
        )
        .bind(session_id)
        .bind(owner)
        .bind(epoch)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn read(&self, session_id: Uuid, after_seq: i64, limit: u32) -> Result<Vec<Event>> {
        let rows = sqlx::query(
            "SELECT seq, kind, payload, created_at FROM journal \
             WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(session_id)
        .bind(after_seq)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() {
            self.require_session(session_id).await?;
        }
        rows.iter()
            .map(|row| {
                Ok(Event {
                    session_id,
                    seq: row.try_get("seq")?,
                    kind: row.try_get("kind")?,
                    payload: row.try_get("payload")?,
                    created_at: row.try_get("created_at")?,
                })
            })
            .collect()
    }

    async fn put_snapshot(&self, session_id: Uuid, seq: i64, state: Value) -> Result<()> {
        self.require_session(session_id).await?;
        sqlx::query(
            "INSERT INTO snapshots (session_id, seq, state, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, state = excluded.state, \
             created_at = excluded.created_at WHERE excluded.seq >= snapshots.seq",
        )
        .bind(session_id)
        .bind(seq)
        .bind(&state)
        .bind(now_micros())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn latest_snapshot(&self, session_id: Uuid) -> Result<Option<Snapshot>> {
        let row = sqlx::query("SELECT seq, state, created_at FROM snapshots WHERE session_id = $1")
            .bind(session_id)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            None => {
                self.require_session(session_id).await?;
                Ok(None)
            }
            Some(row) => Ok(Some(Snapshot {
                session_id,
                seq: row.try_get("seq")?,
                state: row.try_get("state")?,
                created_at: row.try_get("created_at")?,
            })),
        }
    }

    async fn compact(
        &self,
        session_id: Uuid,
        through_seq: i64,
        state: Value,
        summary: Value,
    ) -> Result<Compaction> {
        let now = now_micros();
        let mut tx = self.pool.begin().await?;
        // Locks the session's row: an append racing the compaction waits, then finds it ended.
        let gate = sqlx::query(
            "SELECT 1 FROM sessions WHERE id = $1 AND status IN ('closed', 'failed') \
             AND last_seq = $2 FOR UPDATE",
        )
        .bind(session_id)
        .bind(through_seq)
        .fetch_optional(&mut *tx)
        .await?;
        if gate.is_none() {
            drop(tx);
            let session = self.fetch_session(session_id).await?;
            return Err(crate::not_compactable(&session, through_seq));
        }
        sqlx::query(
            "INSERT INTO snapshots (session_id, seq, state, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, state = excluded.state, \
             created_at = excluded.created_at",
        )
        .bind(session_id)
        .bind(through_seq)
        .bind(&state)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO journal_compactions (session_id, through_seq, state, summary, compacted_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (session_id) DO UPDATE SET \
             through_seq = excluded.through_seq, state = excluded.state, \
             summary = excluded.summary, compacted_at = excluded.compacted_at",
        )
        .bind(session_id)
        .bind(through_seq)
        .bind(&state)
        .bind(&summary)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM journal WHERE session_id = $1 AND seq <= $2")
            .bind(session_id)
            .bind(through_seq)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Compaction {
            session_id,
            through_seq,
            state,
            summary,
            compacted_at: now,
        })
    }

    async fn compaction(&self, session_id: Uuid) -> Result<Option<Compaction>> {
        let row = sqlx::query(
            "SELECT through_seq, state, summary, compacted_at FROM journal_compactions \
             WHERE session_id = $1",
        )
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            None => {
                self.require_session(session_id).await?;
                Ok(None)
            }
            Some(row) => Ok(Some(Compaction {
                session_id,
                through_seq: row.try_get("through_seq")?,
                state: row.try_get("state")?,
                summary: row.try_get("summary")?,
                compacted_at: row.try_get("compacted_at")?,
            })),
        }
    }

    async fn compaction_candidates(
        &self,
        before: DateTime<Utc>,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: u32,
    ) -> Result<Vec<(Uuid, DateTime<Utc>)>> {
        let rows = sqlx::query(
            "SELECT s.id, s.updated_at FROM sessions s \
             LEFT JOIN journal_compactions c ON c.session_id = s.id \
             WHERE s.status IN ('closed', 'failed') AND s.updated_at < $1 AND s.last_seq > 0 \
             AND (c.through_seq IS NULL OR c.through_seq < s.last_seq) \
             AND ($2::timestamptz IS NULL OR (s.updated_at, s.id) > ($2, $3)) \
             ORDER BY s.updated_at, s.id LIMIT $4",
        )
        .bind(before)
        .bind(after.map(|(time, _)| time))
        .bind(after.map(|(_, id)| id))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("id")?, row.try_get("updated_at")?)))
            .collect()
    }

    async fn delete_session(&self, id: Uuid) -> Result<()> {
        let done = sqlx::query("DELETE FROM sessions WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(Error::SessionNotFound(id));
        }
        Ok(())
    }

    async fn kv_get(&self, session_id: Uuid, key: &str) -> Result<Option<KvEntry>> {
        let row =
            sqlx::query("SELECT key, value, updated_at FROM kv WHERE session_id = $1 AND key = $2")
                .bind(session_id)
                .bind(key)
                .fetch_optional(&self.pool)
                .await?;
        match row {
            None => {
                self.require_session(session_id).await?;
                Ok(None)
            }
            Some(row) => kv_from_row(&row).map(Some),
        }
    }

    async fn kv_set(&self, session_id: Uuid, key: &str, value: Value) -> Result<KvEntry> {
        self.require_session(session_id).await?;
        crate::prepare_payload("kv", &value, usize::MAX)?;
        let now = now_micros();
        sqlx::query(
            "INSERT INTO kv (session_id, key, value, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value, \
             updated_at = excluded.updated_at",
        )
        .bind(session_id)
        .bind(key)
        .bind(&value)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(KvEntry {
            key: key.to_string(),
            value,
            updated_at: now,
        })
    }

    async fn kv_delete(&self, session_id: Uuid, key: &str) -> Result<bool> {
        self.require_session(session_id).await?;
        let done = sqlx::query("DELETE FROM kv WHERE session_id = $1 AND key = $2")
            .bind(session_id)
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn kv_list(&self, session_id: Uuid, prefix: &str) -> Result<Vec<KvEntry>> {
        self.require_session(session_id).await?;
        let rows = sqlx::query(
            "SELECT key, value, updated_at FROM kv \
             WHERE session_id = $1 AND starts_with(key, $2) ORDER BY key COLLATE \"C\"",
        )
        .bind(session_id)
        .bind(prefix)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(kv_from_row).collect()
    }

    async fn insert_request_log(&self, entries: &[RequestLogEntry]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for chunk in entries.chunks(LOG_ROWS_PER_STATEMENT) {
            let mut sql =
                QueryBuilder::<Postgres>::new(format!("INSERT INTO request_log ({LOG_COLUMNS}) "));
            sql.push_values(chunk, |mut row, e| {
                row.push_bind(e.id)
                    .push_bind(e.at)
                    .push_bind(e.session_id)
                    .push_bind(e.api_key.clone())
                    .push_bind(e.route.clone())
                    .push_bind(e.provider.clone())
                    .push_bind(e.model.clone())
                    .push_bind(e.status.clone())
                    .push_bind(e.attempts.clone())
                    .push_bind(e.latency_ms)
                    .push_bind(e.ttft_ms)
                    .push_bind(e.tokens_in)
                    .push_bind(e.tokens_out)
                    .push_bind(e.cost)
                    .push_bind(e.cache_hit)
                    .push_bind(e.stream)
                    .push_bind(e.metadata.clone())
                    .push_bind(e.error.clone());
            });
            sql.push(" ON CONFLICT (id) DO NOTHING");
            sql.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn list_request_log(&self, query: &RequestLogQuery) -> Result<RequestLogPage> {
        let limit = query.page_size();
        let mut sql = QueryBuilder::<Postgres>::new(format!(
            "SELECT {LOG_COLUMNS} FROM request_log WHERE TRUE"
        ));
        push_log_filters(&mut sql, query)?;
        if let Some(cursor) = query.cursor_id()? {
            sql.push(" AND id < ").push_bind(cursor);
        }
        sql.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit) + 1);
        let rows = sql.build().fetch_all(&self.pool).await?;
        let entries = rows.iter().map(log_from_row).collect::<Result<Vec<_>>>()?;
        Ok(into_log_page(entries, limit))
    }

    async fn request_log_stats(
        &self,
        query: &RequestLogQuery,
        group_by: &StatsGroupBy,
    ) -> Result<Vec<StatsRow>> {
        let mut sql = QueryBuilder::<Postgres>::new("SELECT ");
        match group_by {
            StatsGroupBy::Route => sql.push("route"),
            StatsGroupBy::Provider => sql.push("provider"),
            StatsGroupBy::Model => sql.push("model"),
            StatsGroupBy::Metadata(key) => sql
                .push("metadata ->> ")
                .push_bind(RequestLogQuery::metadata_key(key)?.to_string()),
        };
        sql.push(
            " AS key, status, cache_hit, latency_ms, ttft_ms, tokens_in, tokens_out, cost \
             FROM request_log WHERE TRUE",
        );
        push_log_filters(&mut sql, query)?;
        sql.push(" ORDER BY id DESC LIMIT ")
            .push_bind(MAX_STATS_ROWS);
        let rows = sql.build().fetch_all(&self.pool).await?;
        let inputs = rows
            .iter()
            .map(|row| {
                Ok(StatsInput {
                    key: row.try_get("key")?,
                    ok: row.try_get::<String, _>("status")? == "ok",
                    cache_hit: row.try_get("cache_hit")?,
                    latency_ms: row.try_get("latency_ms")?,
                    ttft_ms: row.try_get("ttft_ms")?,
                    tokens_in: row.try_get("tokens_in")?,
                    tokens_out: row.try_get("tokens_out")?,
                    cost: row.try_get("cost")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(compute_stats(inputs))
    }

    fn journal_stats(&self) -> crate::JournalStats {
        self.journal.stats()
    }

    async fn shutdown(&self) {
        self.journal.shutdown().await;
        self.pool.close().await;
    }
}

async fn applied_versions(conn: &mut sqlx::PgConnection) -> Result<Vec<i64>> {
    let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text")
        .fetch_one(&mut *conn)
        .await?;
    if exists.is_none() {
        return Ok(Vec::new());
    }
    Ok(
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(&mut *conn)
            .await?,
    )
}

struct PgBatchWriter {
    pool: PgPool,
}

#[async_trait]
impl BatchWriter for PgBatchWriter {
    async fn write_batch(&mut self, batch: &[AppendRequest]) -> Result<Vec<Outcome>> {
        let mut tx = self.pool.begin().await?;
        let now = now_micros();
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut rejected: Vec<usize> = Vec::new();
        for round in rounds(batch) {
            let mut req_ids = Vec::with_capacity(round.len());
            let mut req_expected = Vec::with_capacity(round.len());
            let mut req_new_last = Vec::with_capacity(round.len());
            let mut req_epochs = Vec::with_capacity(round.len());
            let mut req_statuses: Vec<Option<&str>> = Vec::with_capacity(round.len());
            let mut ev_ids = Vec::new();
            let mut ev_seqs = Vec::new();
            let mut ev_kinds = Vec::new();
            let mut ev_payloads = Vec::new();
            let mut ev_times = Vec::new();
            for &index in &round {
                let request = &batch[index];
                req_ids.push(request.session_id);
                req_expected.push(request.expected_last_seq);
                req_new_last.push(request.expected_last_seq + request.events.len() as i64);
                req_epochs.push(request.epoch.unwrap_or(-1));
                req_statuses.push(request.status.map(|s| s.as_str()));
                for (offset, event) in request.events.iter().enumerate() {
                    ev_ids.push(request.session_id);
                    ev_seqs.push(request.expected_last_seq + 1 + offset as i64);
                    ev_kinds.push(event.kind.as_str());
                    ev_payloads.push(event.payload.as_str());
                    ev_times.push(event.created_at);
                }
            }
            let updated: HashSet<Uuid> = sqlx::query_scalar::<_, Uuid>(FENCED_APPEND)
                .bind(&req_ids)
                .bind(&req_expected)
                .bind(&req_new_last)
                .bind(now)
                .bind(&ev_ids)
                .bind(&ev_seqs)
                .bind(&ev_kinds)
                .bind(&ev_payloads)
                .bind(&ev_times)
                .bind(&req_epochs)
                .bind(&req_statuses)
                .fetch_all(&mut *tx)
                .await?
                .into_iter()
                .collect();
            for &index in &round {
                if updated.contains(&batch[index].session_id) {
                    outcomes[index] = Some(Outcome::Appended);
                } else {
                    rejected.push(index);
                }
            }
        }
        if !rejected.is_empty() {
            let ids: Vec<Uuid> = rejected.iter().map(|&i| batch[i].session_id).collect();
            let rows: Vec<(Uuid, i64, i64)> =
                sqlx::query_as("SELECT id, last_seq, lease_epoch FROM sessions WHERE id = ANY($1)")
                    .bind(&ids)
                    .fetch_all(&mut *tx)
                    .await?;
            for index in rejected {
                let request = &batch[index];
                let actual = rows
                    .iter()
                    .find(|(id, _, _)| *id == request.session_id)
                    .map(|(_, last, epoch)| (*last, *epoch));
                outcomes[index] = Some(match actual {
                    Some((_, current)) if request.epoch.is_some_and(|e| e != current) => {
                        Outcome::Fenced { current }
                    }
                    Some((actual, _)) => Outcome::Conflict { actual },
                    None => Outcome::NotFound,
                });
            }
        }
        tx.commit().await?;
        Ok(outcomes
            .into_iter()
            .map(|o| o.expect("every request of a batch gets an outcome"))
            .collect())
    }
}

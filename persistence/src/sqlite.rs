//! The embedded backend: one SQLite file in WAL mode with `synchronous=FULL`.
//!
//! All writes go through one connection (SQLite has one writer anyway; serializing in-process
//! avoids `SQLITE_BUSY`), reads through a small pool of reader connections that WAL lets run
//! beside the writer. Ids are stored as hyphenated text, times as Unix microseconds, JSON as
//! text.

use std::collections::HashSet;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Acquire, QueryBuilder, Row, Sqlite};
use uuid::Uuid;

use crate::group_commit::{
    rounds, AppendRequest, BatchWriter, GroupCommit, Outcome, PreparedEvent,
};
use crate::request_log::{
    compute_stats, into_log_page, RequestLogEntry, RequestLogPage, RequestLogQuery, StatsGroupBy,
    StatsInput, StatsRow, LOG_ROWS_PER_STATEMENT, MAX_STATS_ROWS,
};
use crate::types::{into_page, micros_to_time, now_micros};
use crate::{
    Backend, Compaction, DatabaseUrl, Error, Event, JournalStore, KvEntry, Lease, MigrationReport,
    NewEvent, NewSession, Result, Session, SessionPage, SessionQuery, SessionStatus, Snapshot,
    StoreOptions,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// Rows per multi-row INSERT (5 bound values each, well under SQLite's variable limit).
const INSERT_CHUNK: usize = 500;
/// Requests per fenced UPDATE (3 bound values each).
const UPDATE_CHUNK: usize = 1000;

const SESSION_COLUMNS: &str =
    "id, agent, status, metadata, last_seq, created_at, updated_at, closed_at";

pub struct SqliteStore {
    writer: SqlitePool,
    readers: SqlitePool,
    journal: GroupCommit,
}

impl SqliteStore {
    pub async fn open(options: &StoreOptions) -> Result<Self> {
        let DatabaseUrl::Sqlite(path) = &options.url else {
            return Err(Error::Config("not an sqlite URL".into()));
        };
        let connect = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            // Statement journals of multi-row writes stay in memory instead of temp files.
            .pragma("temp_store", "memory")
            .busy_timeout(std::time::Duration::from_secs(10));
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(std::time::Duration::from_secs(60))
            .connect_with(connect.clone())
            .await
            .map_err(|e| {
                Error::Config(format!(
                    "cannot open SQLite database {}: {e}",
                    path.display()
                ))
            })?;
        let readers = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(
                options
                    .connect_timeout
                    .max(std::time::Duration::from_secs(30)),
            )
            .connect_with(connect)
            .await?;
        let journal = GroupCommit::start(
            SqliteBatchWriter {
                writer: writer.clone(),
            },
            options.max_event_bytes,
            options.max_batch_events,
        );
        Ok(SqliteStore {
            writer,
            readers,
            journal,
        })
    }

    async fn fetch_session(&self, id: Uuid) -> Result<Session> {
        let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?");
        sqlx::query(&sql)
            .bind(id.to_string())
            .fetch_optional(&self.readers)
            .await?
            .map(|row| session_from_row(&row))
            .transpose()?
            .ok_or(Error::SessionNotFound(id))
    }

    async fn require_session(&self, id: Uuid) -> Result<()> {
        let found = sqlx::query("SELECT 1 FROM sessions WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.readers)
            .await?;
        found.map(|_| ()).ok_or(Error::SessionNotFound(id))
    }
}

fn parse_uuid(text: &str) -> Result<Uuid> {
    Uuid::try_parse(text).map_err(|e| Error::Corrupt(format!("id `{text}`: {e}")))
}

fn parse_json(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt(format!("JSON: {e}")))
}

const LOG_COLUMNS: &str = "id, at, session_id, api_key, route, provider, model, status, attempts, \
     latency_ms, ttft_ms, tokens_in, tokens_out, cost, cache_hit, stream, metadata, error";

/// The filters of a request-log query (ids and times as stored: text and microseconds).
fn push_log_filters(sql: &mut QueryBuilder<'_, Sqlite>, query: &RequestLogQuery) -> Result<()> {
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
        sql.push(" AND session_id = ")
            .push_bind(session.to_string());
    }
    if let Some(hit) = query.cache_hit {
        sql.push(" AND cache_hit = ").push_bind(hit);
    }
    if let Some(since) = query.since {
        sql.push(" AND at >= ").push_bind(since.timestamp_micros());
    }
    if let Some(until) = query.until {
        sql.push(" AND at < ").push_bind(until.timestamp_micros());
    }
    if let Some((key, value)) = &query.metadata {
        sql.push(" AND CAST(json_extract(metadata, ")
            .push_bind(format!("$.\"{}\"", RequestLogQuery::metadata_key(key)?))
            .push(") AS TEXT) = ")
            .push_bind(value.clone());
    }
    Ok(())
}

fn log_from_row(row: &SqliteRow) -> Result<RequestLogEntry> {
    Ok(RequestLogEntry {
        id: parse_uuid(&row.try_get::<String, _>("id")?)?,
        at: micros_to_time(row.try_get("at")?),
        session_id: row
            .try_get::<Option<String>, _>("session_id")?
            .as_deref()
            .map(parse_uuid)
            .transpose()?,
        api_key: row.try_get("api_key")?,
        route: row.try_get("route")?,
        provider: row.try_get("provider")?,
        model: row.try_get("model")?,
        status: row.try_get("status")?,
        attempts: parse_json(&row.try_get::<String, _>("attempts")?)?,
        latency_ms: row.try_get("latency_ms")?,
        ttft_ms: row.try_get("ttft_ms")?,
        tokens_in: row.try_get("tokens_in")?,
        tokens_out: row.try_get("tokens_out")?,
        cost: row.try_get("cost")?,
        cache_hit: row.try_get("cache_hit")?,
        stream: row.try_get("stream")?,
        metadata: parse_json(&row.try_get::<String, _>("metadata")?)?,
        error: row.try_get("error")?,
    })
}

fn session_from_row(row: &SqliteRow) -> Result<Session> {
    let status: String = row.try_get("status")?;
    Ok(Session {
        id: parse_uuid(&row.try_get::<String, _>("id")?)?,
        agent: row.try_get("agent")?,
        status: SessionStatus::from_str(&status)?,
        metadata: parse_json(&row.try_get::<String, _>("metadata")?)?,
        last_seq: row.try_get("last_seq")?,
        created_at: micros_to_time(row.try_get("created_at")?),
        updated_at: micros_to_time(row.try_get("updated_at")?),
        closed_at: row
            .try_get::<Option<i64>, _>("closed_at")?
            .map(micros_to_time),
    })
}

fn kv_from_row(row: &SqliteRow) -> Result<KvEntry> {
    Ok(KvEntry {
        key: row.try_get("key")?,
        value: parse_json(&row.try_get::<String, _>("value")?)?,
        updated_at: micros_to_time(row.try_get("updated_at")?),
    })
}

#[async_trait]
impl JournalStore for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.readers).await?;
        Ok(())
    }

    async fn migrate(&self) -> Result<MigrationReport> {
        let before = applied_versions(&mut *self.writer.acquire().await?).await?;
        MIGRATOR.run(&self.writer).await?;
        let after = applied_versions(&mut *self.writer.acquire().await?).await?;
        Ok(MigrationReport::between(&before, &after))
    }

    async fn create_session(&self, new: NewSession) -> Result<Session> {
        let session = Session::new_idle(new);
        let now = session.created_at;
        sqlx::query(
            "INSERT INTO sessions (id, agent, status, metadata, last_seq, created_at, updated_at) \
             VALUES (?, ?, ?, ?, 0, ?, ?)",
        )
        .bind(session.id.to_string())
        .bind(&session.agent)
        .bind(session.status.as_str())
        .bind(session.metadata.to_string())
        .bind(now.timestamp_micros())
        .bind(now.timestamp_micros())
        .execute(&self.writer)
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
        let mut sql = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE 1 = 1"
        ));
        if let Some(agent) = &query.agent {
            sql.push(" AND agent = ").push_bind(agent.clone());
        }
        if let Some(status) = query.status {
            sql.push(" AND status = ").push_bind(status.as_str());
        }
        if let Some(cursor) = cursor {
            sql.push(" AND (created_at < ")
                .push_bind(cursor.created_at_us)
                .push(" OR (created_at = ")
                .push_bind(cursor.created_at_us)
                .push(" AND id < ")
                .push_bind(cursor.id.to_string())
                .push("))");
        }
        sql.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .push_bind(i64::from(limit) + 1);
        let rows = sql.build().fetch_all(&self.readers).await?;
        let sessions = rows
            .iter()
            .map(session_from_row)
            .collect::<Result<Vec<_>>>()?;
        Ok(into_page(sessions, limit))
    }

    async fn count_sessions(&self) -> Result<Vec<(SessionStatus, i64)>> {
        let rows = sqlx::query("SELECT status, COUNT(*) AS n FROM sessions GROUP BY status")
            .fetch_all(&self.readers)
            .await?;
        rows.iter()
            .map(|row| {
                let status: String = row.try_get("status")?;
                Ok((status.parse()?, row.try_get("n")?))
            })
            .collect()
    }

    async fn update_status(&self, id: Uuid, status: SessionStatus) -> Result<Session> {
        let done = sqlx::query("UPDATE sessions SET status = ?, updated_at = ? WHERE id = ?")
            .bind(status.as_str())
            .bind(now_micros().timestamp_micros())
            .bind(id.to_string())
            .execute(&self.writer)
            .await?;
        if done.rows_affected() == 0 {
            return Err(Error::SessionNotFound(id));
        }
        self.fetch_session(id).await
    }

    async fn close_session(&self, id: Uuid) -> Result<Session> {
        let now = now_micros().timestamp_micros();
        let done = sqlx::query(
            "UPDATE sessions SET status = 'closed', updated_at = ?, \
             closed_at = COALESCE(closed_at, ?) WHERE id = ?",
        )
        .bind(now)
        .bind(now)
        .bind(id.to_string())
        .execute(&self.writer)
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
            "UPDATE sessions SET lease_owner = ?, lease_epoch = lease_epoch + 1, \
             lease_expires_at = ? WHERE id = ? AND \
             (lease_owner IS NULL OR lease_owner = ? OR lease_expires_at < ?) \
             RETURNING lease_epoch",
        )
        .bind(owner)
        .bind(until.timestamp_micros())
        .bind(session_id.to_string())
        .bind(owner)
        .bind(now.timestamp_micros())
        .fetch_optional(&self.writer)
        .await?;
        if let Some(epoch) = epoch {
            return Ok(Lease {
                owner: owner.to_string(),
                epoch,
                expires_at: until,
            });
        }
        let holder: Option<(Option<String>, i64)> =
            sqlx::query_as("SELECT lease_owner, lease_expires_at FROM sessions WHERE id = ?")
                .bind(session_id.to_string())
                .fetch_optional(&self.writer)
                .await?;
        match holder {
            Some((holder, until)) => Err(Error::LeaseHeld {
                session_id,
                owner: holder.unwrap_or_default(),
                until: micros_to_time(until),
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
            "UPDATE sessions SET lease_expires_at = ? \
             WHERE id = ? AND lease_owner = ? AND lease_epoch = ?",
        )
        .bind(until.timestamp_micros())
        .bind(session_id.to_string())
        .bind(owner)
        .bind(epoch)
        .execute(&self.writer)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(Lease {
                owner: owner.to_string(),
                epoch,
                expires_at: until,
            });
        }
        let current: Option<i64> =
            sqlx::query_scalar("SELECT lease_epoch FROM sessions WHERE id = ?")
                .bind(session_id.to_string())
                .fetch_optional(&self.writer)
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
            "UPDATE sessions SET lease_owner = NULL, lease_expires_at = 0 \
             WHERE id = ? AND lease_owner = ? AND lease_epoch = ?",
        )
        .bind(session_id.to_string())
        .bind(owner)
        .bind(epoch)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn read(&self, session_id: Uuid, after_seq: i64, limit: u32) -> Result<Vec<Event>> {
        let rows = sqlx::query(
            "SELECT seq, kind, payload, created_at FROM journal \
             WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(session_id.to_string())
        .bind(after_seq)
        .bind(i64::from(limit))
        .fetch_all(&self.readers)
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
                    payload: parse_json(&row.try_get::<String, _>("payload")?)?,
                    created_at: micros_to_time(row.try_get("created_at")?),
                })
            })
            .collect()
    }

    async fn put_snapshot(&self, session_id: Uuid, seq: i64, state: Value) -> Result<()> {
        self.require_session(session_id).await?;
        sqlx::query(
            "INSERT INTO snapshots (session_id, seq, state, created_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, state = excluded.state, \
             created_at = excluded.created_at WHERE excluded.seq >= snapshots.seq",
        )
        .bind(session_id.to_string())
        .bind(seq)
        .bind(state.to_string())
        .bind(now_micros().timestamp_micros())
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn latest_snapshot(&self, session_id: Uuid) -> Result<Option<Snapshot>> {
        let row = sqlx::query("SELECT seq, state, created_at FROM snapshots WHERE session_id = ?")
            .bind(session_id.to_string())
            .fetch_optional(&self.readers)
            .await?;
        match row {
            None => {
                self.require_session(session_id).await?;
                Ok(None)
            }
            Some(row) => Ok(Some(Snapshot {
                session_id,
                seq: row.try_get("seq")?,
                state: parse_json(&row.try_get::<String, _>("state")?)?,
                created_at: micros_to_time(row.try_get("created_at")?),
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
        let id = session_id.to_string();
        let now = now_micros();
        let mut tx = self.writer.begin().await?;
        // A write first, so the transaction holds SQLite's write lock before it checks anything.
        let gate = sqlx::query(
            "UPDATE sessions SET updated_at = updated_at \
             WHERE id = ? AND status IN ('closed', 'failed') AND last_seq = ?",
        )
        .bind(&id)
        .bind(through_seq)
        .execute(&mut *tx)
        .await?;
        if gate.rows_affected() == 0 {
            drop(tx);
            let session = self.fetch_session(session_id).await?;
            return Err(crate::not_compactable(&session, through_seq));
        }
        let state_text = state.to_string();
        sqlx::query(
            "INSERT INTO snapshots (session_id, seq, state, created_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, state = excluded.state, \
             created_at = excluded.created_at",
        )
        .bind(&id)
        .bind(through_seq)
        .bind(&state_text)
        .bind(now.timestamp_micros())
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO journal_compactions (session_id, through_seq, state, summary, compacted_at) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET \
             through_seq = excluded.through_seq, state = excluded.state, \
             summary = excluded.summary, compacted_at = excluded.compacted_at",
        )
        .bind(&id)
        .bind(through_seq)
        .bind(&state_text)
        .bind(summary.to_string())
        .bind(now.timestamp_micros())
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM journal WHERE session_id = ? AND seq <= ?")
            .bind(&id)
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
             WHERE session_id = ?",
        )
        .bind(session_id.to_string())
        .fetch_optional(&self.readers)
        .await?;
        match row {
            None => {
                self.require_session(session_id).await?;
                Ok(None)
            }
            Some(row) => Ok(Some(Compaction {
                session_id,
                through_seq: row.try_get("through_seq")?,
                state: parse_json(&row.try_get::<String, _>("state")?)?,
                summary: parse_json(&row.try_get::<String, _>("summary")?)?,
                compacted_at: micros_to_time(row.try_get("compacted_at")?),
            })),
        }
    }

    async fn compaction_candidates(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        after: Option<(chrono::DateTime<chrono::Utc>, Uuid)>,
        limit: u32,
    ) -> Result<Vec<(Uuid, chrono::DateTime<chrono::Utc>)>> {
        let (after_time, after_id) = match after {
            Some((time, id)) => (time.timestamp_micros(), id.to_string()),
            None => (i64::MIN, String::new()),
        };
        let rows = sqlx::query(
            "SELECT s.id, s.updated_at FROM sessions s \
             LEFT JOIN journal_compactions c ON c.session_id = s.id \
             WHERE s.status IN ('closed', 'failed') AND s.updated_at < ? AND s.last_seq > 0 \
             AND (c.through_seq IS NULL OR c.through_seq < s.last_seq) \
             AND (s.updated_at > ? OR (s.updated_at = ? AND s.id > ?)) \
             ORDER BY s.updated_at, s.id LIMIT ?",
        )
        .bind(before.timestamp_micros())
        .bind(after_time)
        .bind(after_time)
        .bind(after_id)
        .bind(i64::from(limit))
        .fetch_all(&self.readers)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    parse_uuid(&row.try_get::<String, _>("id")?)?,
                    micros_to_time(row.try_get("updated_at")?),
                ))
            })
            .collect()
    }

    async fn delete_session(&self, id: Uuid) -> Result<()> {
        let done = sqlx::query("DELETE FROM sessions WHERE id = ?")
            .bind(id.to_string())
            .execute(&self.writer)
            .await?;
        if done.rows_affected() == 0 {
            return Err(Error::SessionNotFound(id));
        }
        Ok(())
    }

    async fn kv_get(&self, session_id: Uuid, key: &str) -> Result<Option<KvEntry>> {
        let row =
            sqlx::query("SELECT key, value, updated_at FROM kv WHERE session_id = ? AND key = ?")
                .bind(session_id.to_string())
                .bind(key)
                .fetch_optional(&self.readers)
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
        let now = now_micros();
        sqlx::query(
            "INSERT INTO kv (session_id, key, value, updated_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value, \
             updated_at = excluded.updated_at",
        )
        .bind(session_id.to_string())
        .bind(key)
        .bind(value.to_string())
        .bind(now.timestamp_micros())
        .execute(&self.writer)
        .await?;
        Ok(KvEntry {
            key: key.to_string(),
            value,
            updated_at: now,
        })
    }

    async fn kv_delete(&self, session_id: Uuid, key: &str) -> Result<bool> {
        self.require_session(session_id).await?;
        let done = sqlx::query("DELETE FROM kv WHERE session_id = ? AND key = ?")
            .bind(session_id.to_string())
            .bind(key)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn kv_list(&self, session_id: Uuid, prefix: &str) -> Result<Vec<KvEntry>> {
        self.require_session(session_id).await?;
        // `substr` rather than LIKE: a prefix may contain `%` or `_`.
        let rows = sqlx::query(
            "SELECT key, value, updated_at FROM kv \
             WHERE session_id = ? AND substr(key, 1, length(?)) = ? ORDER BY key",
        )
        .bind(session_id.to_string())
        .bind(prefix)
        .bind(prefix)
        .fetch_all(&self.readers)
        .await?;
        rows.iter().map(kv_from_row).collect()
    }

    async fn insert_request_log(&self, entries: &[RequestLogEntry]) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        for chunk in entries.chunks(LOG_ROWS_PER_STATEMENT) {
            let mut sql = QueryBuilder::<Sqlite>::new(format!(
                "INSERT OR IGNORE INTO request_log ({LOG_COLUMNS}) "
            ));
            sql.push_values(chunk, |mut row, e| {
                row.push_bind(e.id.to_string())
                    .push_bind(e.at.timestamp_micros())
                    .push_bind(e.session_id.map(|s| s.to_string()))
                    .push_bind(e.api_key.clone())
                    .push_bind(e.route.clone())
                    .push_bind(e.provider.clone())
                    .push_bind(e.model.clone())
                    .push_bind(e.status.clone())
                    .push_bind(e.attempts.to_string())
                    .push_bind(e.latency_ms)
                    .push_bind(e.ttft_ms)
                    .push_bind(e.tokens_in)
                    .push_bind(e.tokens_out)
                    .push_bind(e.cost)
                    .push_bind(e.cache_hit)
                    .push_bind(e.stream)
                    .push_bind(e.metadata.to_string())
                    .push_bind(e.error.clone());
            });
            sql.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn list_request_log(&self, query: &RequestLogQuery) -> Result<RequestLogPage> {
        let limit = query.page_size();
        let mut sql = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {LOG_COLUMNS} FROM request_log WHERE 1 = 1"
        ));
        push_log_filters(&mut sql, query)?;
        if let Some(cursor) = query.cursor_id()? {
            sql.push(" AND id < ").push_bind(cursor.to_string());
        }
        sql.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit) + 1);
        let rows = sql.build().fetch_all(&self.readers).await?;
        let entries = rows.iter().map(log_from_row).collect::<Result<Vec<_>>>()?;
        Ok(into_log_page(entries, limit))
    }

    async fn request_log_stats(
        &self,
        query: &RequestLogQuery,
        group_by: &StatsGroupBy,
    ) -> Result<Vec<StatsRow>> {
        let mut sql = QueryBuilder::<Sqlite>::new("SELECT ");
        match group_by {
            StatsGroupBy::Route => sql.push("route"),
            StatsGroupBy::Provider => sql.push("provider"),
            StatsGroupBy::Model => sql.push("model"),
            StatsGroupBy::Metadata(key) => sql
                .push("CAST(json_extract(metadata, ")
                .push_bind(format!("$.\"{}\"", RequestLogQuery::metadata_key(key)?))
                .push(") AS TEXT)"),
        };
        sql.push(
            " AS key, status, cache_hit, latency_ms, ttft_ms, tokens_in, tokens_out, cost \
             FROM request_log WHERE 1 = 1",
        );
        push_log_filters(&mut sql, query)?;
        sql.push(" ORDER BY id DESC LIMIT ")
            .push_bind(MAX_STATS_ROWS);
        let rows = sql.build().fetch_all(&self.readers).await?;
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
        self.readers.close().await;
        self.writer.close().await;
    }
}

async fn applied_versions(conn: &mut sqlx::SqliteConnection) -> Result<Vec<i64>> {
    let exists: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_optional(&mut *conn)
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

struct SqliteBatchWriter {
    writer: SqlitePool,
}

#[async_trait]
impl BatchWriter for SqliteBatchWriter {
    async fn write_batch(&mut self, batch: &[AppendRequest]) -> Result<Vec<Outcome>> {
        let mut conn = self.writer.acquire().await?;
        let mut tx = conn.begin().await?;
        let now = now_micros().timestamp_micros();
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut rejected = Vec::new();
        for round in rounds(batch) {
            for chunk in round.chunks(UPDATE_CHUNK) {
                // One fenced UPDATE per round: a request is admitted only when the session's
                // last_seq still equals its expected_last_seq.
                let mut update = QueryBuilder::<Sqlite>::new(
                    "UPDATE sessions SET last_seq = req.column3, updated_at = ",
                );
                update
                    .push_bind(now)
                    .push(
                        ", status = COALESCE(req.column5, sessions.status), \
                         closed_at = CASE WHEN req.column5 = 'closed' THEN ",
                    )
                    .push_bind(now)
                    .push(" ELSE sessions.closed_at END FROM (");
                update.push_values(chunk, |mut row, &index| {
                    let request = &batch[index];
                    row.push_bind(request.session_id.to_string())
                        .push_bind(request.expected_last_seq)
                        .push_bind(request.expected_last_seq + request.events.len() as i64)
                        .push_bind(request.epoch.unwrap_or(-1))
                        .push_bind(request.status.map(|s| s.as_str()));
                });
                update.push(
                    ") AS req WHERE sessions.id = req.column1 AND sessions.last_seq = req.column2 \
                     AND (req.column4 < 0 OR sessions.lease_epoch = req.column4) \
                     RETURNING sessions.id",
                );
                let admitted: Vec<String> = update.build_query_scalar().fetch_all(&mut *tx).await?;
                let admitted: HashSet<Uuid> = admitted
                    .iter()
                    .map(|id| parse_uuid(id))
                    .collect::<Result<_>>()?;
                for &index in chunk {
                    if admitted.contains(&batch[index].session_id) {
                        outcomes[index] = Some(Outcome::Appended);
                    } else {
                        rejected.push(index);
                    }
                }
            }
        }
        for index in rejected {
            let actual: Option<(i64, i64)> =
                sqlx::query_as("SELECT last_seq, lease_epoch FROM sessions WHERE id = ?")
                    .bind(batch[index].session_id.to_string())
                    .fetch_optional(&mut *tx)
                    .await?;
            outcomes[index] = Some(match actual {
                Some((_, current)) if batch[index].epoch.is_some_and(|e| e != current) => {
                    Outcome::Fenced { current }
                }
                Some((actual, _)) => Outcome::Conflict { actual },
                None => Outcome::NotFound,
            });
        }
        let rows: Vec<(String, i64, &PreparedEvent)> = batch
            .iter()
            .zip(&outcomes)
            .filter(|(_, outcome)| **outcome == Some(Outcome::Appended))
            .flat_map(|(request, _)| {
                let id = request.session_id.to_string();
                request.events.iter().enumerate().map(move |(i, event)| {
                    (id.clone(), request.expected_last_seq + 1 + i as i64, event)
                })
            })
            .collect();
        for chunk in rows.chunks(INSERT_CHUNK) {
            let mut insert = QueryBuilder::<Sqlite>::new(
                "INSERT INTO journal (session_id, seq, kind, payload, created_at) ",
            );
            insert.push_values(chunk, |mut row, (id, seq, event)| {
                row.push_bind(id.as_str())
                    .push_bind(*seq)
                    .push_bind(event.kind.as_str())
                    .push_bind(event.payload.as_str())
                    .push_bind(event.created_at.timestamp_micros());
            });
            insert.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(outcomes
            .into_iter()
            .map(|o| o.expect("every request of a batch gets an outcome"))
            .collect())
    }
}

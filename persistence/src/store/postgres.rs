//! The PostgreSQL dialect: ids as `uuid`, times as `timestamptz`, JSON as `jsonb`, one pool for
//! reads and writes, and one connection of its own for the journal's committer.
//!
//! A group commit writes each round of a batch (each session at most once per round) with one
//! set-based statement: a fenced `UPDATE sessions … WHERE last_seq = expected` whose returned
//! ids gate the `INSERT INTO journal`. A batch of one round (the usual case) is that one
//! statement in its implicit transaction — one round trip; several rounds share one
//! `BEGIN … COMMIT`. Either way a batch costs one commit (one WAL flush) whatever its size.
//! The conditional update also fences writers in other processes: a concurrent transaction
//! blocks on the row lock, re-checks `last_seq` after the first commits and updates nothing.

use std::collections::HashSet;
use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions, Connection, Postgres, QueryBuilder, Row};
use uuid::Uuid;

use super::dialect::{Arg, Columns, Dialect, On, Sql};
use super::SqlStore;
use crate::group_commit::{
    admit, rounds, settled, AppendRequest, BatchWriter, GroupCommit, Outcome,
};
use crate::types::now_micros;
use crate::{redact_url, Backend, DatabaseUrl, Error, Result, StoreOptions};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

const FENCED_APPEND: &str = "
WITH req AS (
    SELECT * FROM unnest($1::uuid[], $2::int8[], $3::int8[], $10::int8[], $11::text[])
        AS r(session_id, expected, new_last, epoch, status)
), upd AS (
    UPDATE sessions s SET last_seq = req.new_last, updated_at = $4,
        status = COALESCE(req.status, s.status),
        closed_at = CASE WHEN req.status = 'closed' THEN $4 ELSE s.closed_at END,
        ended_at = CASE WHEN req.status IN ('closed', 'failed') THEN $4 ELSE s.ended_at END
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

/// A PostgreSQL database.
pub(crate) struct Pg {
    pool: PgPool,
}

/// Connects (naming an unreachable server or a refused login as such) and starts the group
/// committer.
pub(crate) async fn open(options: &StoreOptions) -> Result<SqlStore<Pg>> {
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
        .connect_with(connect.clone())
        .await?;
    let writers = (0..options.journal_writers.max(1))
        .map(|_| PgBatchWriter {
            connect: connect.clone(),
            connect_timeout: options.connect_timeout,
            conn: None,
            last_used: std::time::Instant::now(),
        })
        .collect();
    let journal =
        GroupCommit::start_pipelined(writers, options.max_event_bytes, options.max_batch_events);
    Ok(SqlStore::new(Pg { pool }, journal).with_clock_skew(options.clock_skew))
}

impl Columns for PgRow {
    fn int(&self, column: &str) -> Result<i64> {
        Ok(self.try_get(column)?)
    }
    fn real(&self, column: &str) -> Result<f64> {
        Ok(self.try_get(column)?)
    }
    fn opt_real(&self, column: &str) -> Result<Option<f64>> {
        Ok(self.try_get(column)?)
    }
    fn opt_int(&self, column: &str) -> Result<Option<i64>> {
        Ok(self.try_get(column)?)
    }
    fn bytes(&self, column: &str) -> Result<Vec<u8>> {
        Ok(self.try_get(column)?)
    }
    fn flag(&self, column: &str) -> Result<bool> {
        Ok(self.try_get(column)?)
    }
    fn text(&self, column: &str) -> Result<String> {
        Ok(self.try_get(column)?)
    }
    fn opt_text(&self, column: &str) -> Result<Option<String>> {
        Ok(self.try_get(column)?)
    }
    fn id(&self, column: &str) -> Result<Uuid> {
        Ok(self.try_get(column)?)
    }
    fn opt_id(&self, column: &str) -> Result<Option<Uuid>> {
        Ok(self.try_get(column)?)
    }
    fn time(&self, column: &str) -> Result<DateTime<Utc>> {
        Ok(self.try_get(column)?)
    }
    fn opt_time(&self, column: &str) -> Result<Option<DateTime<Utc>>> {
        Ok(self.try_get(column)?)
    }
    fn json(&self, column: &str) -> Result<Value> {
        Ok(self.try_get(column)?)
    }
}

#[async_trait]
impl Dialect for Pg {
    type Db = Postgres;
    type Row = PgRow;

    const BACKEND: Backend = Backend::Postgres;
    const DATABASE_CLOCK: bool = true;
    const JSON_HOLDS_NUL: bool = false;
    const BYTE_ORDER: &'static str = " COLLATE \"C\"";

    fn reader(&self) -> &PgPool {
        &self.pool
    }

    fn writer(&self) -> &PgPool {
        &self.pool
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    async fn applied_migrations(&self) -> Result<Vec<i64>> {
        let mut conn = self.pool.acquire().await?;
        let exists: Option<String> =
            sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text")
                .fetch_one(&mut *conn)
                .await?;
        if exists.is_none() {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_scalar(
            "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
        )
        .fetch_all(&mut *conn)
        .await?)
    }

    async fn run_migrations(&self) -> Result<()> {
        Ok(MIGRATOR.run(&self.pool).await?)
    }

    fn bind(builder: &mut QueryBuilder<'static, Postgres>, value: Arg) {
        match value {
            Arg::Id(v) => builder.push_bind(v),
            Arg::OptId(v) => builder.push_bind(v),
            Arg::Time(v) => builder.push_bind(v),
            Arg::Micros(v) => builder.push_bind(crate::types::micros_to_time(v)),
            Arg::Json(v) => builder.push_bind(v),
            Arg::Text(v) => builder.push_bind(v),
            Arg::OptText(v) => builder.push_bind(v),
            Arg::Int(v) => builder.push_bind(v),
            Arg::Real(v) => builder.push_bind(v),
            Arg::OptReal(v) => builder.push_bind(v),
            Arg::Bool(v) => builder.push_bind(v),
            Arg::Bytes(v) => builder.push_bind(v),
            Arg::OptInt(v) => builder.push_bind(v),
        };
    }

    async fn fetch_all(
        on: On<'_, Postgres>,
        builder: &mut QueryBuilder<'static, Postgres>,
    ) -> sqlx::Result<Vec<PgRow>> {
        let query = builder.build();
        match on {
            On::Pool(pool) => query.fetch_all(pool).await,
            On::Tx(tx) => query.fetch_all(&mut **tx).await,
        }
    }

    async fn fetch_optional(
        on: On<'_, Postgres>,
        builder: &mut QueryBuilder<'static, Postgres>,
    ) -> sqlx::Result<Option<PgRow>> {
        let query = builder.build();
        match on {
            On::Pool(pool) => query.fetch_optional(pool).await,
            On::Tx(tx) => query.fetch_optional(&mut **tx).await,
        }
    }

    async fn execute(
        on: On<'_, Postgres>,
        builder: &mut QueryBuilder<'static, Postgres>,
    ) -> sqlx::Result<u64> {
        let query = builder.build();
        let done = match on {
            On::Pool(pool) => query.execute(pool).await?,
            On::Tx(tx) => query.execute(&mut **tx).await?,
        };
        Ok(done.rows_affected())
    }

    fn push_json_text(sql: &mut Sql<Self>, column: &str, key: &str) {
        sql.push(format!("{column} ->> ")).bind(key);
    }

    fn push_starts_with(sql: &mut Sql<Self>, column: &str, prefix: &str) {
        sql.push(format!("starts_with({column}, "))
            .bind(prefix)
            .push(")");
    }

    fn lock_ended_session(session_id: Uuid, through_seq: i64) -> Sql<Self> {
        // Locks the session's row: an append racing the compaction waits, then finds it ended.
        let mut sql = Sql::new("SELECT 1 FROM sessions WHERE id = ");
        sql.bind(session_id)
            .push(" AND status IN ('closed', 'failed') AND last_seq = ")
            .bind(through_seq)
            .push(" FOR UPDATE");
        sql
    }
}

/// A committer connection idle this long is pinged before its next batch (and replaced when
/// the ping fails), so that a server restarted while the journal was quiet costs no failed
/// append.
const PING_WHEN_IDLE_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// The committer's own connection: not taken from the pool, whose every acquire first pings
/// the server (one more round trip per batch); pinged only after [`PING_WHEN_IDLE_FOR`].
/// Dropped on any error, so that the next batch starts on a fresh connection (a restarted
/// server, a broken socket).
struct PgBatchWriter {
    connect: PgConnectOptions,
    connect_timeout: std::time::Duration,
    conn: Option<PgConnection>,
    last_used: std::time::Instant,
}

#[async_trait]
impl BatchWriter for PgBatchWriter {
    async fn write_batch(
        &mut self,
        batch: Vec<AppendRequest>,
    ) -> (Vec<AppendRequest>, Result<Vec<Outcome>>) {
        let written = self.write(&batch).await;
        (batch, written)
    }
}

impl PgBatchWriter {
    async fn write(&mut self, batch: &[AppendRequest]) -> Result<Vec<Outcome>> {
        if self.last_used.elapsed() >= PING_WHEN_IDLE_FOR {
            if let Some(conn) = &mut self.conn {
                if conn.ping().await.is_err() {
                    self.conn = None;
                }
            }
        }
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => {
                let conn = tokio::time::timeout(self.connect_timeout, self.connect.connect())
                    .await
                    .map_err(|_| Error::CommitFailed("no connection to PostgreSQL".into()))??;
                self.conn.insert(conn)
            }
        };
        let written = write_batch(conn, batch).await;
        self.last_used = std::time::Instant::now();
        if written.is_err() {
            self.conn = None;
        }
        written
    }
}

/// Writes `batch`: a batch of one round (each session once, the usual case) as one statement
/// in its own implicit transaction — one round trip, one commit; several rounds inside
/// `BEGIN … COMMIT`.
async fn write_batch(conn: &mut PgConnection, batch: &[AppendRequest]) -> Result<Vec<Outcome>> {
    let now = now_micros();
    let rounds = rounds(batch);
    let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
    let mut rejected: Vec<usize> = Vec::new();
    if let [round] = rounds.as_slice() {
        let updated = append_round(&mut *conn, batch, round, now).await?;
        admit(batch, round, &updated, &mut outcomes, &mut rejected);
        // The statement has committed; the state of a rejected session is read afterwards
        // (it only names why the append was refused).
        reject(&mut *conn, batch, rejected, &mut outcomes).await?;
    } else {
        let mut tx = conn.begin().await?;
        for round in &rounds {
            let updated = append_round(&mut tx, batch, round, now).await?;
            admit(batch, round, &updated, &mut outcomes, &mut rejected);
        }
        reject(&mut tx, batch, rejected, &mut outcomes).await?;
        tx.commit().await?;
    }
    Ok(settled(outcomes))
}

/// Runs the fenced append of one round; returns the sessions it advanced.
async fn append_round(
    conn: &mut PgConnection,
    batch: &[AppendRequest],
    round: &[usize],
    now: DateTime<Utc>,
) -> Result<HashSet<Uuid>> {
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
    for &index in round {
        let request = &batch[index];
        req_ids.push(request.session_id);
        req_expected.push(request.expected_last_seq);
        req_new_last.push(request.expected_last_seq + request.events.len() as i64);
        req_epochs.push(request.epoch.map_or(-1, |e| e.0));
        req_statuses.push(request.status.map(|s| s.as_str()));
        for (offset, event) in request.events.iter().enumerate() {
            ev_ids.push(request.session_id);
            ev_seqs.push(request.expected_last_seq + 1 + offset as i64);
            ev_kinds.push(event.kind.as_str());
            ev_payloads.push(event.payload.as_str());
            ev_times.push(event.created_at);
        }
    }
    Ok(sqlx::query_scalar::<_, Uuid>(FENCED_APPEND)
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
        .fetch_all(conn)
        .await?
        .into_iter()
        .collect())
}

/// Gives each rejected request its outcome from its session's current row.
async fn reject(
    conn: &mut PgConnection,
    batch: &[AppendRequest],
    rejected: Vec<usize>,
    outcomes: &mut [Option<Outcome>],
) -> Result<()> {
    if rejected.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = rejected.iter().map(|&i| batch[i].session_id).collect();
    let rows: Vec<(Uuid, i64, i64)> =
        sqlx::query_as("SELECT id, last_seq, lease_epoch FROM sessions WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(conn)
            .await?;
    for index in rejected {
        let request = &batch[index];
        let found = rows
            .iter()
            .find(|(id, _, _)| *id == request.session_id)
            .map(|(_, last, epoch)| (*last, *epoch));
        outcomes[index] = Some(super::rejected(request, found));
    }
    Ok(())
}

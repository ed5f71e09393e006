//! The embedded dialect: one SQLite file in WAL mode with `synchronous=FULL`.
//!
//! All writes but the journal's go through one sqlx connection (SQLite has one writer anyway;
//! serializing in-process avoids `SQLITE_BUSY`); the journal's group commit writes through its
//! own C-API connection (`sqlite_journal`) while holding that one. Reads go through a small
//! pool of reader connections that WAL lets run beside the writer. Ids are stored as hyphenated
//! text, times as Unix microseconds, JSON as text.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Connection, QueryBuilder, Row, Sqlite};
use uuid::Uuid;

use super::dialect::{Arg, Columns, Dialect, On, Sql};
use super::sqlite_journal::{Direct, SqliteBatchWriter};
use super::SqlStore;
use crate::group_commit::GroupCommit;
use crate::types::micros_to_time;
use crate::{Backend, DatabaseUrl, Error, Result, StoreOptions};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// An SQLite database file.
pub(crate) struct Lite {
    writer: SqlitePool,
    readers: SqlitePool,
}

/// Opens (creating) the file with its pragmas, the writer and the readers, and starts the group
/// committer.
pub(crate) async fn open(options: &StoreOptions) -> Result<SqlStore<Lite>> {
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
    let writer_connect = match options.sqlite_max_pages {
        Some(pages) => connect.clone().pragma("max_page_count", pages.to_string()),
        None => connect.clone(),
    };
    let writer = SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .acquire_timeout(std::time::Duration::from_secs(60))
        // An in-process connection cannot lose its server; the ping would cost the journal
        // writer, which takes this connection as its gate, one hop to sqlx's worker per batch.
        .test_before_acquire(false)
        // A connection that comes back while a transaction is open on it — the transaction
        // failed (SQLITE_FULL, an I/O error) and its rollback is still queued, failed, or only
        // rolled back to a savepoint — is closed, never reused. Reused, sqlx's idea of the
        // nesting and SQLite's can disagree: the next transaction becomes a savepoint inside
        // the one left open, its "commit" only releases that savepoint, and every append
        // acknowledged from then on is lost (found by `stead bench chaos --fault disk-full`).
        .after_release(|conn, _| Box::pin(async move { Ok(!conn.is_in_transaction()) }))
        .connect_with(writer_connect)
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
    let direct = Direct {
        path: path.clone(),
        max_pages: options.sqlite_max_pages,
    };
    let journal = GroupCommit::start(
        SqliteBatchWriter::start(direct, writer.clone()).await?,
        options.max_event_bytes,
        options.max_batch_events,
    );
    Ok(SqlStore::new(Lite { writer, readers }, journal).with_clock_skew(options.clock_skew))
}

fn parse_uuid(text: &str) -> Result<Uuid> {
    Uuid::try_parse(text).map_err(|e| Error::Corrupt(format!("id `{text}`: {e}")))
}

fn parse_json(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt(format!("JSON: {e}")))
}

impl Columns for SqliteRow {
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
        parse_uuid(&self.try_get::<String, _>(column)?)
    }
    fn opt_id(&self, column: &str) -> Result<Option<Uuid>> {
        self.try_get::<Option<String>, _>(column)?
            .as_deref()
            .map(parse_uuid)
            .transpose()
    }
    fn time(&self, column: &str) -> Result<DateTime<Utc>> {
        Ok(micros_to_time(self.try_get(column)?))
    }
    fn opt_time(&self, column: &str) -> Result<Option<DateTime<Utc>>> {
        Ok(self.try_get::<Option<i64>, _>(column)?.map(micros_to_time))
    }
    fn json(&self, column: &str) -> Result<Value> {
        parse_json(&self.try_get::<String, _>(column)?)
    }
}

#[async_trait]
impl Dialect for Lite {
    type Db = Sqlite;
    type Row = SqliteRow;

    const BACKEND: Backend = Backend::Sqlite;
    const DATABASE_CLOCK: bool = false;
    const JSON_HOLDS_NUL: bool = true;
    const BYTE_ORDER: &'static str = "";

    fn reader(&self) -> &SqlitePool {
        &self.readers
    }

    fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }

    async fn applied_migrations(&self) -> Result<Vec<i64>> {
        let mut conn = self.writer.acquire().await?;
        let exists: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
        )
        .fetch_optional(&mut *conn)
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
        Ok(MIGRATOR.run(&self.writer).await?)
    }

    fn bind(builder: &mut QueryBuilder<'static, Sqlite>, value: Arg) {
        match value {
            Arg::Id(v) => builder.push_bind(v.to_string()),
            Arg::OptId(v) => builder.push_bind(v.map(|v| v.to_string())),
            Arg::Time(v) => builder.push_bind(v.timestamp_micros()),
            Arg::Micros(v) => builder.push_bind(v),
            Arg::Json(v) => builder.push_bind(v.to_string()),
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
        on: On<'_, Sqlite>,
        builder: &mut QueryBuilder<'static, Sqlite>,
    ) -> sqlx::Result<Vec<SqliteRow>> {
        let query = builder.build();
        match on {
            On::Pool(pool) => query.fetch_all(pool).await,
            On::Tx(tx) => query.fetch_all(&mut **tx).await,
        }
    }

    async fn fetch_optional(
        on: On<'_, Sqlite>,
        builder: &mut QueryBuilder<'static, Sqlite>,
    ) -> sqlx::Result<Option<SqliteRow>> {
        let query = builder.build();
        match on {
            On::Pool(pool) => query.fetch_optional(pool).await,
            On::Tx(tx) => query.fetch_optional(&mut **tx).await,
        }
    }

    async fn execute(
        on: On<'_, Sqlite>,
        builder: &mut QueryBuilder<'static, Sqlite>,
    ) -> sqlx::Result<u64> {
        let query = builder.build();
        let done = match on {
            On::Pool(pool) => query.execute(pool).await?,
            On::Tx(tx) => query.execute(&mut **tx).await?,
        };
        Ok(done.rows_affected())
    }

    fn push_json_text(sql: &mut Sql<Self>, column: &str, key: &str) {
        sql.push(format!("CAST(json_extract({column}, "))
            .bind(format!("$.\"{key}\""))
            .push(") AS TEXT)");
    }

    fn push_starts_with(sql: &mut Sql<Self>, column: &str, prefix: &str) {
        // `substr` rather than LIKE: a prefix may contain `%` or `_`.
        sql.push(format!("substr({column}, 1, length("))
            .bind(prefix)
            .push(")) = ")
            .bind(prefix);
    }

    fn lock_ended_session(session_id: Uuid, through_seq: i64) -> Sql<Self> {
        // A write first, so the transaction holds SQLite's write lock before it checks anything.
        let mut sql = Sql::new("UPDATE sessions SET updated_at = updated_at WHERE id = ");
        sql.bind(session_id)
            .push(" AND status IN ('closed', 'failed') AND last_seq = ")
            .bind(through_seq)
            .push(" RETURNING id");
        sql
    }
}

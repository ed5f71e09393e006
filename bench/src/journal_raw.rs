//! The raw baseline of `stead bench journal`: the same rows written straight into the storage
//! engine with perfect batching — one transaction per round holding one row per session, as
//! one multi-row `INSERT` — through the same driver (sqlx) and the same durability settings
//! (SQLite: WAL, `synchronous = FULL`; PostgreSQL: its defaults, `synchronous_commit = on`).
//! No Stead code runs in between: this is the most the storage can do for this workload, and
//! the journal's figure is reported as a share of it.
//!
//! On SQLite the same rows are also written through SQLite's C API (`rusqlite`, on one thread:
//! a cached one-row `INSERT` executed once per session inside `BEGIN IMMEDIATE … COMMIT`, the
//! pragmas of Stead's writer), since sqlx's SQLite driver is itself a ceiling: that is the
//! engine's own figure.

use std::time::Instant;

use serde_json::json;
use sqlx::{Connection, QueryBuilder};
use stead_persistence::DatabaseUrl;

/// One id per session, as the journal writes them.
fn session_ids(sessions: usize) -> Vec<String> {
    (0..sessions)
        .map(|_| uuid::Uuid::now_v7().to_string())
        .collect()
}

/// The payload of round `seq`: what a model call's event carries, with `bytes` of text.
fn payload(seq: usize, bytes: usize) -> String {
    json!({ "call_id": format!("c{seq}"), "text": "x".repeat(bytes), "usage": { "prompt_tokens": 37, "completion_tokens": 64 } })
        .to_string()
}

/// Rows per second the engine took, `rounds × sessions` rows written in `rounds` commits.
pub async fn raw_rows_per_sec(
    url: &DatabaseUrl,
    sessions: usize,
    rounds: usize,
    payload_bytes: usize,
) -> anyhow::Result<f64> {
    let ids = session_ids(sessions);
    match url {
        DatabaseUrl::Sqlite(path) => {
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sqlx::sqlite::SqliteSynchronous::Full);
            let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
            sqlx::query(
                "CREATE TABLE raw_journal (session_id TEXT NOT NULL, seq INTEGER NOT NULL, \
                 kind TEXT NOT NULL, payload TEXT NOT NULL, created_at INTEGER NOT NULL, \
                 PRIMARY KEY (session_id, seq)) WITHOUT ROWID",
            )
            .execute(&mut conn)
            .await?;
            let started = Instant::now();
            for seq in 1..=rounds {
                let body = payload(seq, payload_bytes);
                let now = chrono::Utc::now().timestamp_micros();
                let mut tx = conn.begin().await?;
                let mut insert = QueryBuilder::new(
                    "INSERT INTO raw_journal (session_id, seq, kind, payload, created_at) ",
                );
                insert.push_values(&ids, |mut row, id| {
                    row.push_bind(id)
                        .push_bind(seq as i64)
                        .push_bind("model_call_finished")
                        .push_bind(&body)
                        .push_bind(now);
                });
                insert.build().execute(&mut *tx).await?;
                tx.commit().await?;
            }
            Ok((rounds * sessions) as f64 / started.elapsed().as_secs_f64())
        }
        DatabaseUrl::Postgres(url) => {
            pg_rows_per_sec_on(url, sessions, rounds, payload_bytes, 1).await
        }
    }
}

/// The PostgreSQL raw baseline on `connections` connections at once, each writing its share of
/// the sessions in perfect batches (what a journal with that many writers could at most do).
pub async fn pg_rows_per_sec_on(
    url: &str,
    sessions: usize,
    rounds: usize,
    payload_bytes: usize,
    connections: usize,
) -> anyhow::Result<f64> {
    let mut setup = sqlx::PgConnection::connect(url).await?;
    sqlx::query(
        "CREATE TABLE raw_journal (session_id uuid NOT NULL, seq BIGINT NOT NULL, \
         kind TEXT NOT NULL, payload jsonb NOT NULL, created_at TIMESTAMPTZ NOT NULL, \
         PRIMARY KEY (session_id, seq))",
    )
    .execute(&mut setup)
    .await?;
    let ids: Vec<uuid::Uuid> = (0..sessions).map(|_| uuid::Uuid::now_v7()).collect();
    let mut conns = Vec::new();
    for _ in 0..connections.max(1) {
        conns.push(sqlx::PgConnection::connect(url).await?);
    }
    let share = sessions.div_ceil(conns.len());
    let started = Instant::now();
    let writers = conns
        .into_iter()
        .zip(ids.chunks(share))
        .map(
            |(mut conn, ids)| async move { pg_rounds(&mut conn, ids, rounds, payload_bytes).await },
        );
    for written in futures_util::future::join_all(writers).await {
        written?;
    }
    Ok((rounds * sessions) as f64 / started.elapsed().as_secs_f64())
}

/// `rounds` transactions, each one multi-row `INSERT` of one row per id.
async fn pg_rounds(
    conn: &mut sqlx::PgConnection,
    ids: &[uuid::Uuid],
    rounds: usize,
    payload_bytes: usize,
) -> anyhow::Result<()> {
    for seq in 1..=rounds {
        let body: serde_json::Value = serde_json::from_str(&payload(seq, payload_bytes))?;
        let now = chrono::Utc::now();
        let mut tx = conn.begin().await?;
        let mut insert = QueryBuilder::new(
            "INSERT INTO raw_journal (session_id, seq, kind, payload, created_at) ",
        );
        insert.push_values(ids, |mut row, id| {
            row.push_bind(*id)
                .push_bind(seq as i64)
                .push_bind("model_call_finished")
                .push_bind(&body)
                .push_bind(now);
        });
        insert.build().execute(&mut *tx).await?;
        tx.commit().await?;
    }
    Ok(())
}

/// Rows per second through SQLite's C API (`rusqlite`): `rounds` transactions of one row per
/// session, WAL, `synchronous = FULL`, `temp_store = MEMORY`, `foreign_keys = ON` (as Stead's
/// writer), a fresh database at `path`.
pub fn c_api_rows_per_sec(
    path: &std::path::Path,
    sessions: usize,
    rounds: usize,
    payload_bytes: usize,
) -> anyhow::Result<f64> {
    let ids = session_ids(sessions);
    let conn = rusqlite::Connection::open(path)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA temp_store = MEMORY; \
         PRAGMA foreign_keys = ON; \
         CREATE TABLE raw_journal (session_id TEXT NOT NULL, seq INTEGER NOT NULL, \
         kind TEXT NOT NULL, payload TEXT NOT NULL, created_at INTEGER NOT NULL, \
         PRIMARY KEY (session_id, seq)) WITHOUT ROWID;",
    )?;
    let started = Instant::now();
    for seq in 1..=rounds {
        let body = payload(seq, payload_bytes);
        let now = chrono::Utc::now().timestamp_micros();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        {
            let mut insert = conn.prepare_cached(
                "INSERT INTO raw_journal (session_id, seq, kind, payload, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for id in &ids {
                insert.execute(rusqlite::params![
                    id,
                    seq as i64,
                    "model_call_finished",
                    body,
                    now
                ])?;
            }
        }
        conn.execute_batch("COMMIT")?;
    }
    Ok((rounds * sessions) as f64 / started.elapsed().as_secs_f64())
}

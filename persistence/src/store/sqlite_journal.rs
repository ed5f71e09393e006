//! The SQLite journal's writer: its own connection, through SQLite's C API (`rusqlite`), on its
//! own thread.
//!
//! A batch of the group commit is one job for that thread: `BEGIN IMMEDIATE`, per request one
//! cached fenced `UPDATE` of the session's row and, when it is admitted, one cached `INSERT`
//! per event, then `COMMIT` — one hop between the committer task and the thread per batch.
//! Through sqlx every statement was its own hop to sqlx's connection worker, and the
//! multi-row statements were prepared again whenever a batch's size changed (the journal
//! reached 0.52–0.56× of the same rows written through the C API; docs/benchmarks.md).
//!
//! SQLite has one writer at a time and its lock is not fair, so this writer never contends for
//! it with the store's sqlx writer: while it writes a batch it holds that pool's only
//! connection (the gate), as every other write of the store does.

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use sqlx::SqlitePool;
use tokio::sync::oneshot;

use crate::group_commit::{AppendRequest, BatchWriter, Outcome};
use crate::types::now_micros;
use crate::{Error, Result};

/// The fenced update: a request is admitted only when the session's `last_seq` still equals
/// its `expected_last_seq` and, when it names one, the lease epoch is the session's.
const FENCED_UPDATE: &str = "UPDATE sessions SET last_seq = ?3, updated_at = ?6, \
     status = COALESCE(?5, status), \
     closed_at = CASE WHEN ?5 = 'closed' THEN ?6 ELSE closed_at END, \
     ended_at = CASE WHEN ?5 IN ('closed', 'failed') THEN ?6 ELSE ended_at END \
     WHERE id = ?1 AND last_seq = ?2 AND (?4 < 0 OR lease_epoch = ?4)";
const CURRENT: &str = "SELECT last_seq, lease_epoch FROM sessions WHERE id = ?1";
const INSERT: &str = "INSERT INTO journal (session_id, seq, kind, payload, created_at) \
     VALUES (?1, ?2, ?3, ?4, ?5)";

/// How the writer's connection is opened: the file and the pragmas of the store's writer.
#[derive(Debug, Clone)]
pub(crate) struct Direct {
    pub path: std::path::PathBuf,
    pub max_pages: Option<u32>,
}

impl Direct {
    fn open(&self) -> rusqlite::Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
             PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;",
        )?;
        if let Some(pages) = self.max_pages {
            conn.pragma_update(None, "max_page_count", pages)?;
        }
        conn.set_prepared_statement_cache_capacity(8);
        Ok(conn)
    }
}

type Done = oneshot::Sender<(Vec<AppendRequest>, Result<Vec<Outcome>>)>;

/// The committer's side: the gate and the channel to the writer thread. The thread stops when
/// this is dropped (its channel closes).
pub(crate) struct SqliteBatchWriter {
    gate: SqlitePool,
    jobs: std::sync::mpsc::Sender<(Vec<AppendRequest>, Done)>,
}

impl SqliteBatchWriter {
    /// Opens the writer's connection (an error here is the store's open error) and starts its
    /// thread.
    pub(crate) async fn start(direct: Direct, gate: SqlitePool) -> Result<Self> {
        let opened = direct.clone();
        let conn = tokio::task::spawn_blocking(move || opened.open())
            .await
            .map_err(|e| Error::Config(format!("opening the SQLite journal writer: {e}")))?
            .map_err(|e| {
                Error::Config(format!(
                    "cannot open SQLite database {} for the journal writer: {e}",
                    direct.path.display()
                ))
            })?;
        let (jobs, queue) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("stead-journal-sqlite".into())
            .spawn(move || run(direct, conn, queue))
            .map_err(|e| Error::Config(format!("cannot start the journal writer: {e}")))?;
        Ok(SqliteBatchWriter { gate, jobs })
    }
}

#[async_trait::async_trait]
impl BatchWriter for SqliteBatchWriter {
    async fn write_batch(
        &mut self,
        batch: Vec<AppendRequest>,
    ) -> (Vec<AppendRequest>, Result<Vec<Outcome>>) {
        let gate = match self.gate.acquire().await {
            Ok(gate) => gate,
            Err(error) => return (batch, Err(error.into())),
        };
        let (done, written) = oneshot::channel();
        if let Err(job) = self.jobs.send((batch, done)) {
            return (job.0 .0, Err(stopped()));
        }
        let result = written
            .await
            .unwrap_or_else(|_| (Vec::new(), Err(stopped())));
        drop(gate);
        result
    }
}

fn stopped() -> Error {
    Error::CommitFailed("the SQLite journal writer thread stopped".into())
}

/// The writer thread: one batch at a time, each in one transaction. A connection left inside
/// a transaction by a failure (a full disk, an I/O error) that `ROLLBACK` does not end is
/// replaced by a fresh one before the next batch.
fn run(
    direct: Direct,
    mut conn: Connection,
    queue: std::sync::mpsc::Receiver<(Vec<AppendRequest>, Done)>,
) {
    while let Ok((batch, done)) = queue.recv() {
        let result = write(&mut conn, &batch, now_micros().timestamp_micros());
        if result.is_err() && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
            if !conn.is_autocommit() {
                match direct.open() {
                    Ok(fresh) => conn = fresh,
                    Err(error) => {
                        tracing::error!(error = %error, "cannot reopen the SQLite journal writer");
                    }
                }
            }
        }
        let _ = done.send((batch, result.map_err(Error::from)));
    }
}

/// Writes `batch` in one transaction, requests in batch order, each checked against the state
/// the earlier ones left.
fn write(
    conn: &mut Connection,
    batch: &[AppendRequest],
    now: i64,
) -> rusqlite::Result<Vec<Outcome>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut outcomes = Vec::with_capacity(batch.len());
    {
        let mut fence = tx.prepare_cached(FENCED_UPDATE)?;
        let mut insert = tx.prepare_cached(INSERT)?;
        for request in batch {
            let id = request.session_id.to_string();
            let last_seq = request.expected_last_seq + request.events.len() as i64;
            let admitted = fence.execute(params![
                id,
                request.expected_last_seq,
                last_seq,
                request.epoch.map_or(-1, |e| e.0),
                request.status.map(|s| s.as_str()),
                now,
            ])? == 1;
            if !admitted {
                let found: Option<(i64, i64)> = tx
                    .prepare_cached(CURRENT)?
                    .query_row(params![id], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()?;
                outcomes.push(super::rejected(request, found));
                continue;
            }
            for (seq, event) in (request.expected_last_seq + 1..).zip(&request.events) {
                insert.execute(params![
                    id,
                    seq,
                    event.kind,
                    event.payload,
                    event.created_at.timestamp_micros(),
                ])?;
            }
            outcomes.push(Outcome::Appended);
        }
    }
    tx.commit()?;
    Ok(outcomes)
}

//! Removing a session on both backends: [`delete`] (a fork that failed half-way) and [`purge`]
//! (an operator's purge through the API, counting what went). Each locks or deletes the
//! session's row before it touches the journal: an append in flight holds that row's lock and
//! commits first, and an append after it finds no row. The journal has no foreign key to the
//! row on PostgreSQL (migration 28: its per-row check was a third of a group commit's server
//! time), so its rows are deleted here, never by a cascade (docs/persistence.md, *Deleting a
//! session*).

use sqlx::Pool;
use uuid::Uuid;

use super::artifacts;
use super::dialect::{Columns, Dialect, On, Sql};
use crate::{Error, Purged, Result};

/// Deletes session `id`, its journal and (by cascade) everything else of it.
pub(super) async fn delete<D: Dialect>(writer: &Pool<D::Db>, id: Uuid) -> Result<()> {
    let mut tx = writer.begin().await?;
    let deleted = Sql::<D>::new("DELETE FROM sessions WHERE id = ")
        .bind(id)
        .execute(On::Tx(&mut tx))
        .await?;
    if deleted == 0 {
        return Err(Error::SessionNotFound(id));
    }
    Sql::<D>::new("DELETE FROM journal WHERE session_id = ")
        .bind(id)
        .execute(On::Tx(&mut tx))
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Deletes session `id` with its journal, request-log, feedback and artifact rows (counted),
/// and names the artifact blobs no other row names any more.
pub(super) async fn purge<D: Dialect>(writer: &Pool<D::Db>, id: Uuid) -> Result<Purged> {
    let mut tx = writer.begin().await?;
    // A write that changes nothing takes the row's lock (SQLite's write lock) before anything
    // is read.
    let locked = Sql::<D>::new("UPDATE sessions SET updated_at = updated_at WHERE id = ")
        .bind(id)
        .execute(On::Tx(&mut tx))
        .await?;
    if locked == 0 {
        return Err(Error::SessionNotFound(id));
    }
    // The artifacts' blobs, to find which no other row will name.
    let blobs = Sql::<D>::new("SELECT DISTINCT sha256 FROM artifacts WHERE session_id = ")
        .bind(id)
        .fetch_all(On::Tx(&mut tx))
        .await?
        .iter()
        .map(|row| row.text("sha256"))
        .collect::<Result<Vec<String>>>()?;
    // The journal, log, feedback and artifact rows, then the row, whose cascade removes
    // snapshots, KV entries and the compaction.
    let mut deleted = [0; 5];
    let rows = ["journal", "request_log", "feedback", "artifacts"].map(|t| (t, "session_id"));
    for (n, (table, column)) in rows.into_iter().chain([("sessions", "id")]).enumerate() {
        deleted[n] = Sql::<D>::new(format!("DELETE FROM {table} WHERE {column} = "))
            .bind(id)
            .execute(On::Tx(&mut tx))
            .await?;
    }
    let [events, request_log_rows, _, artifacts, _] = deleted;
    let mut orphaned_blobs = Vec::new();
    for sha256 in blobs {
        if !artifacts::named::<D>(On::Tx(&mut tx), &sha256).await? {
            orphaned_blobs.push(sha256);
        }
    }
    tx.commit().await?;
    Ok(Purged {
        events,
        request_log_rows,
        artifacts,
        orphaned_blobs,
    })
}

//! Journal retention: replacing an ended session's journal by its folded state, and finding
//! the sessions to do it for.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::dialect::{Columns, Dialect, On, Sql};
use super::SqlStore;
use crate::types::now_micros;
use crate::{Compaction, Result};

impl<D: Dialect> SqlStore<D> {
    pub(super) async fn compact_ended(
        &self,
        session_id: Uuid,
        through_seq: i64,
        state: Value,
        summary: Value,
    ) -> Result<Compaction> {
        let now = now_micros();
        let mut tx = self.db.writer().begin().await?;
        let gate = D::lock_ended_session(session_id, through_seq)
            .fetch_optional(On::Tx(&mut tx))
            .await?;
        if gate.is_none() {
            drop(tx);
            let session = self.fetch_session(session_id).await?;
            return Err(crate::not_compactable(&session, through_seq));
        }
        Sql::<D>::new("INSERT INTO snapshots (session_id, seq, state, created_at) VALUES (")
            .bind(session_id)
            .push(", ")
            .bind(through_seq)
            .push(", ")
            .bind(&state)
            .push(", ")
            .bind(now)
            .push(
                ") ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, \
                 state = excluded.state, created_at = excluded.created_at",
            )
            .execute(On::Tx(&mut tx))
            .await?;
        Sql::<D>::new(
            "INSERT INTO journal_compactions (session_id, through_seq, state, summary, \
             compacted_at) VALUES (",
        )
        .bind(session_id)
        .push(", ")
        .bind(through_seq)
        .push(", ")
        .bind(&state)
        .push(", ")
        .bind(&summary)
        .push(", ")
        .bind(now)
        .push(
            ") ON CONFLICT (session_id) DO UPDATE SET through_seq = excluded.through_seq, \
             state = excluded.state, summary = excluded.summary, \
             compacted_at = excluded.compacted_at",
        )
        .execute(On::Tx(&mut tx))
        .await?;
        Sql::<D>::new("DELETE FROM journal WHERE session_id = ")
            .bind(session_id)
            .push(" AND seq <= ")
            .bind(through_seq)
            .execute(On::Tx(&mut tx))
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

    pub(super) async fn candidates(
        &self,
        before: DateTime<Utc>,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: u32,
    ) -> Result<Vec<(Uuid, DateTime<Utc>)>> {
        let mut sql = Sql::<D>::new(
            "SELECT s.id, s.ended_at FROM sessions s \
             LEFT JOIN journal_compactions c ON c.session_id = s.id \
             WHERE s.status IN ('closed', 'failed') AND s.ended_at < ",
        );
        sql.bind(before)
            .push(" AND s.last_seq > 0 AND (c.through_seq IS NULL OR c.through_seq < s.last_seq)");
        if let Some((time, id)) = after {
            sql.push(" AND (s.ended_at, s.id) > (")
                .bind(time)
                .push(", ")
                .bind(id)
                .push(")");
        }
        sql.push(" ORDER BY s.ended_at, s.id LIMIT ")
            .bind(i64::from(limit));
        let rows = sql.fetch_all(self.on_read()).await?;
        rows.iter()
            .map(|row| Ok((row.id("id")?, row.time("ended_at")?)))
            .collect()
    }
}

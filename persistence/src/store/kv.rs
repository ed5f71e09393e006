//! Each session's key-value entries (`crate::Kv`) on both backends.

use async_trait::async_trait;
use serde_json::Value;
use uuid::Uuid;

use super::dialect::{Dialect, Sql};
use super::{rows, SqlStore};
use crate::types::now_micros;
use crate::{Kv, KvEntry, Result};

#[async_trait]
impl<D: Dialect> Kv for SqlStore<D> {
    async fn kv_get(&self, session_id: Uuid, key: &str) -> Result<Option<KvEntry>> {
        let row = Sql::<D>::new("SELECT key, value, updated_at FROM kv WHERE session_id = ")
            .bind(session_id)
            .push(" AND key = ")
            .bind(key)
            .fetch_optional(self.on_read())
            .await?;
        self.found_or_none(session_id, row, rows::kv_entry).await
    }

    async fn kv_set(&self, session_id: Uuid, key: &str, value: Value) -> Result<KvEntry> {
        self.require_session(session_id).await?;
        if !D::JSON_HOLDS_NUL {
            crate::prepare_payload("kv", &value, usize::MAX)?;
        }
        let now = now_micros();
        Sql::<D>::new("INSERT INTO kv (session_id, key, value, updated_at) VALUES (")
            .bind(session_id)
            .push(", ")
            .bind(key)
            .push(", ")
            .bind(&value)
            .push(", ")
            .bind(now)
            .push(
                ") ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value, \
                 updated_at = excluded.updated_at",
            )
            .execute(self.on_write())
            .await?;
        Ok(KvEntry {
            key: key.to_string(),
            value,
            updated_at: now,
        })
    }

    async fn kv_delete(&self, session_id: Uuid, key: &str) -> Result<bool> {
        self.require_session(session_id).await?;
        let deleted = Sql::<D>::new("DELETE FROM kv WHERE session_id = ")
            .bind(session_id)
            .push(" AND key = ")
            .bind(key)
            .execute(self.on_write())
            .await?;
        Ok(deleted > 0)
    }

    async fn kv_list(&self, session_id: Uuid, prefix: &str) -> Result<Vec<KvEntry>> {
        self.require_session(session_id).await?;
        let mut sql = Sql::<D>::new("SELECT key, value, updated_at FROM kv WHERE session_id = ");
        sql.bind(session_id).push(" AND ");
        D::push_starts_with(&mut sql, "key", prefix);
        sql.push(" ORDER BY key").push(D::BYTE_ORDER);
        let rows = sql.fetch_all(self.on_read()).await?;
        rows.iter().map(rows::kv_entry).collect()
    }
}

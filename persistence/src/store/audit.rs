//! The audit log on both backends (`crate::audit`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::dialect::{Columns, Dialect, Sql};
use super::SqlStore;
use crate::audit::{AuditEntry, AuditQuery};
use crate::{Audit, Result};

const COLUMNS: &str = "id, at, project_id, actor, action, target, status, source, details";

fn entry(row: &impl Columns) -> Result<AuditEntry> {
    Ok(AuditEntry {
        id: row.id("id")?,
        at: row.time("at")?,
        project_id: row.id("project_id")?,
        actor: row.text("actor")?,
        action: row.text("action")?,
        target: row.text("target")?,
        status: u16::try_from(row.int("status")?).unwrap_or(0),
        source: row.opt_text("source")?,
        details: row.json("details")?,
    })
}

#[async_trait]
impl<D: Dialect> Audit for SqlStore<D> {
    async fn append_audit(&self, entry: &AuditEntry) -> Result<()> {
        let mut sql = Sql::<D>::new(format!("INSERT INTO audit_log ({COLUMNS}) VALUES ("));
        sql.bind(entry.id)
            .push(", ")
            .bind(entry.at)
            .push(", ")
            .bind(entry.project_id)
            .push(", ")
            .bind(entry.actor.as_str())
            .push(", ")
            .bind(entry.action.as_str())
            .push(", ")
            .bind(entry.target.as_str())
            .push(", ")
            .bind(i64::from(entry.status))
            .push(", ")
            .bind(entry.source.clone())
            .push(", ")
            .bind(&entry.details)
            .push(")");
        sql.execute(self.on_write()).await?;
        Ok(())
    }

    async fn list_audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>> {
        let mut sql = Sql::<D>::new(format!("SELECT {COLUMNS} FROM audit_log WHERE TRUE"));
        if let Some(project) = query.scope.project() {
            sql.push(" AND project_id = ").bind(project);
        }
        if let Some(actor) = &query.actor {
            sql.push(" AND actor = ").bind(actor.as_str());
        }
        if let Some(action) = &query.action {
            sql.push(" AND ");
            D::push_starts_with(&mut sql, "action", action);
        }
        if let Some(since) = query.since {
            sql.push(" AND at >= ").bind(since);
        }
        if let Some(until) = query.until {
            sql.push(" AND at < ").bind(until);
        }
        if let Some(before) = query.before {
            // UUIDv7 ids order as their times do.
            sql.push(" AND id < ").bind(before);
        }
        sql.push(" ORDER BY id DESC LIMIT ")
            .bind(i64::from(query.limit.clamp(1, crate::MAX_PAGE)));
        let rows = sql.fetch_all(self.on_read()).await?;
        rows.iter().map(entry).collect()
    }

    async fn prune_audit(&self, before: DateTime<Utc>) -> Result<u64> {
        let removed = Sql::<D>::new("DELETE FROM audit_log WHERE at < ")
            .bind(before)
            .execute(self.on_write())
            .await?;
        Ok(removed)
    }
}

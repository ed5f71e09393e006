//! The schedules' due index on both backends (`crate::schedules`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::dialect::{Columns, Dialect, Sql};
use super::SqlStore;
use crate::types::now_micros;
use crate::{Result, ScheduleOwner, ScheduleQuery, ScheduleRow, Schedules};

const COLUMNS: &str =
    "owner, key, session_id, agent, definition, next_due_at, updated_at, project_id";

fn decode(row: &impl Columns) -> Result<ScheduleRow> {
    let agent = row.text("agent")?;
    let owner = match row.opt_id("session_id")? {
        Some(id) => ScheduleOwner::Session(id),
        None => ScheduleOwner::Agent {
            project: row.id("project_id")?,
            name: agent.clone(),
        },
    };
    Ok(ScheduleRow {
        owner,
        key: row.text("key")?,
        agent,
        definition: row.json("definition")?,
        next_due_at: row.time("next_due_at")?,
        updated_at: row.time("updated_at")?,
    })
}

#[async_trait]
impl<D: Dialect> Schedules for SqlStore<D> {
    async fn put_schedules(&self, rows: &[ScheduleRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let now = now_micros();
        let mut sql = Sql::<D>::new(format!("INSERT INTO schedules ({COLUMNS}) "));
        sql.values(rows, |row| {
            [
                row.owner.column().into(),
                row.key.clone().into(),
                row.owner.session_id().into(),
                row.agent.clone().into(),
                row.definition.clone().into(),
                row.next_due_at.into(),
                now.into(),
                // A session's rows follow their session's project when read.
                row.owner.project().unwrap_or(crate::DEFAULT_PROJECT).into(),
            ]
        })
        .push(
            " ON CONFLICT (owner, key) DO UPDATE SET definition = excluded.definition, \
             next_due_at = excluded.next_due_at, updated_at = excluded.updated_at",
        );
        sql.execute(self.on_write()).await?;
        Ok(())
    }

    async fn delete_schedule(&self, owner: &ScheduleOwner, key: &str) -> Result<bool> {
        let deleted = Sql::<D>::new("DELETE FROM schedules WHERE owner = ")
            .bind(owner.column())
            .push(" AND key = ")
            .bind(key)
            .execute(self.on_write())
            .await?;
        Ok(deleted > 0)
    }

    async fn due_schedules(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<ScheduleRow>> {
        let rows = Sql::<D>::new(format!(
            "SELECT {COLUMNS} FROM schedules WHERE next_due_at <= "
        ))
        .bind(now)
        .push(" ORDER BY next_due_at, owner, key LIMIT ")
        .bind(i64::from(limit.max(1)))
        .fetch_all(self.on_read())
        .await?;
        rows.iter().map(decode).collect()
    }

    async fn next_schedule_due(&self) -> Result<Option<DateTime<Utc>>> {
        let row = Sql::<D>::new("SELECT next_due_at FROM schedules ORDER BY next_due_at LIMIT 1")
            .fetch_optional(self.on_read())
            .await?;
        row.map(|row| row.time("next_due_at")).transpose()
    }

    async fn list_schedules(&self, query: &ScheduleQuery) -> Result<Vec<ScheduleRow>> {
        let mut sql = Sql::<D>::new(format!("SELECT {COLUMNS} FROM schedules WHERE TRUE"));
        if let Some(project) = query.scope.project() {
            // A session's schedules follow their session's project; an agent's carry their own.
            sql.push(
                " AND (CASE WHEN session_id IS NULL THEN project_id ELSE (SELECT project_id \
                 FROM sessions WHERE sessions.id = schedules.session_id) END) = ",
            )
            .bind(project);
        }
        if let Some(before) = query.due_before {
            sql.push(" AND next_due_at <= ").bind(before);
        }
        if let Some(id) = query.session_id {
            sql.push(" AND session_id = ").bind(id);
        }
        if let Some(agent) = &query.agent {
            sql.push(" AND session_id IS NULL AND agent = ")
                .bind(agent.as_str());
        }
        let limit = query.limit.clamp(1, crate::MAX_PAGE);
        sql.push(" ORDER BY next_due_at, owner, key LIMIT ")
            .bind(i64::from(limit));
        let rows = sql.fetch_all(self.on_read()).await?;
        rows.iter().map(decode).collect()
    }

    async fn advance_schedule(
        &self,
        owner: &ScheduleOwner,
        key: &str,
        from: DateTime<Utc>,
        to: Option<DateTime<Utc>>,
    ) -> Result<bool> {
        let mut sql = match to {
            Some(to) => {
                let mut sql = Sql::<D>::new("UPDATE schedules SET next_due_at = ");
                sql.bind(to).push(", updated_at = ").bind(now_micros());
                sql
            }
            None => Sql::<D>::new("DELETE FROM schedules"),
        };
        sql.push(" WHERE owner = ")
            .bind(owner.column())
            .push(" AND key = ")
            .bind(key)
            .push(" AND next_due_at = ")
            .bind(from);
        Ok(sql.execute(self.on_write()).await? == 1)
    }
}

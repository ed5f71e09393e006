//! Projects and virtual keys on both backends (`crate::tenancy`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::dialect::{Columns, Dialect, On, Sql};
use super::SqlStore;
use crate::tenancy::{KeyRole, KeyRow, ProjectRow};
use crate::types::now_micros;
use crate::{Error, Result, Tenancy};

const PROJECT_COLUMNS: &str = "id, name, settings, created_at";
const KEY_COLUMNS: &str = "id, project_id, name, role, prefix, digest, routes, budget_usd, \
                           budget_period_secs, rpm, tpm, expires_at, revoked_at, rotated_from, \
                           created_at";

fn project(row: &impl Columns) -> Result<ProjectRow> {
    Ok(ProjectRow {
        id: row.id("id")?,
        name: row.text("name")?,
        settings: row.json("settings")?,
        created_at: row.time("created_at")?,
    })
}

fn key(row: &impl Columns) -> Result<KeyRow> {
    let role = row.text("role")?;
    let routes = match row.json("routes")? {
        Value::Null => None,
        other => Some(
            serde_json::from_value(other)
                .map_err(|e| Error::Corrupt(format!("a key's routes: {e}")))?,
        ),
    };
    Ok(KeyRow {
        id: row.id("id")?,
        project_id: row.id("project_id")?,
        name: row.text("name")?,
        role: KeyRole::parse(&role).ok_or_else(|| Error::Corrupt(format!("key role `{role}`")))?,
        prefix: row.text("prefix")?,
        digest: row.text("digest")?,
        routes,
        budget_usd: row.opt_real("budget_usd")?,
        budget_period_secs: row.opt_int("budget_period_secs")?,
        rpm: row.opt_int("rpm")?,
        tpm: row.opt_int("tpm")?,
        expires_at: row.opt_time("expires_at")?,
        revoked_at: row.opt_time("revoked_at")?,
        rotated_from: row.opt_id("rotated_from")?,
        created_at: row.time("created_at")?,
    })
}

/// Revokes the live key `id` of `project` (nothing for another project's key).
fn revoke<D: Dialect>(project: Uuid, id: Uuid) -> Sql<D> {
    let mut sql = Sql::<D>::new("UPDATE api_keys SET revoked_at = ");
    sql.bind(now_micros())
        .push(" WHERE id = ")
        .bind(id)
        .push(" AND project_id = ")
        .bind(project)
        .push(" AND revoked_at IS NULL");
    sql
}

/// `value` bound, or SQL `NULL`.
fn time_or_null<D: Dialect>(sql: &mut Sql<D>, value: Option<DateTime<Utc>>) {
    match value {
        Some(at) => sql.bind(at),
        None => sql.push("NULL"),
    };
}

impl<D: Dialect> SqlStore<D> {
    async fn insert_key(&self, key: &KeyRow, on: On<'_, D::Db>) -> Result<()> {
        let routes = key
            .routes
            .as_ref()
            .map_or(Value::Null, |r| serde_json::json!(r));
        let mut sql = Sql::<D>::new(format!("INSERT INTO api_keys ({KEY_COLUMNS}) VALUES ("));
        sql.bind(key.id)
            .push(", ")
            .bind(key.project_id)
            .push(", ")
            .bind(key.name.as_str())
            .push(", ")
            .bind(key.role.as_str())
            .push(", ")
            .bind(key.prefix.as_str())
            .push(", ")
            .bind(key.digest.as_str())
            .push(", ")
            .bind(routes)
            .push(", ")
            .bind(key.budget_usd)
            .push(", ")
            .bind(key.budget_period_secs)
            .push(", ")
            .bind(key.rpm)
            .push(", ")
            .bind(key.tpm)
            .push(", ");
        time_or_null(&mut sql, key.expires_at);
        sql.push(", ");
        time_or_null(&mut sql, key.revoked_at);
        sql.push(", ")
            .bind(key.rotated_from)
            .push(", ")
            .bind(key.created_at)
            .push(")");
        sql.execute(on).await.map_err(|e| match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                Error::Exists("a key with this secret exists".into())
            }
            _ => Error::Database(e),
        })?;
        Ok(())
    }
}

#[async_trait]
impl<D: Dialect> Tenancy for SqlStore<D> {
    async fn create_project(&self, name: &str) -> Result<ProjectRow> {
        let inserted = Sql::<D>::new(format!("INSERT INTO projects ({PROJECT_COLUMNS}) VALUES ("))
            .bind(Uuid::now_v7())
            .push(", ")
            .bind(name)
            .push(", ")
            .bind(serde_json::json!({}))
            .push(", ")
            .bind(now_micros())
            .push(") ON CONFLICT (name) DO NOTHING")
            .execute(self.on_write())
            .await?;
        if inserted == 0 {
            return Err(Error::Exists(format!("project `{name}` exists")));
        }
        self.project_by_name(name).await
    }

    async fn project_by_name(&self, name: &str) -> Result<ProjectRow> {
        let row = Sql::<D>::new(format!(
            "SELECT {PROJECT_COLUMNS} FROM projects WHERE name = "
        ))
        .bind(name)
        .fetch_optional(self.on_read())
        .await?
        .ok_or_else(|| Error::NotFound(format!("no project is named `{name}`")))?;
        project(&row)
    }

    async fn list_projects(&self, after: Option<&str>, limit: u32) -> Result<Vec<ProjectRow>> {
        let mut sql = Sql::<D>::new(format!("SELECT {PROJECT_COLUMNS} FROM projects"));
        if let Some(after) = after {
            sql.push(" WHERE name > ").bind(after);
        }
        sql.push(" ORDER BY name LIMIT ")
            .bind(i64::from(limit.clamp(1, crate::MAX_PAGE)));
        let rows = sql.fetch_all(self.on_read()).await?;
        rows.iter().map(project).collect()
    }

    async fn project_by_id(&self, id: Uuid) -> Result<ProjectRow> {
        let row = Sql::<D>::new(format!(
            "SELECT {PROJECT_COLUMNS} FROM projects WHERE id = "
        ))
        .bind(id)
        .fetch_optional(self.on_read())
        .await?
        .ok_or_else(|| Error::NotFound(format!("no project {id}")))?;
        project(&row)
    }

    async fn set_project_settings(&self, id: Uuid, settings: &Value) -> Result<ProjectRow> {
        let updated = Sql::<D>::new("UPDATE projects SET settings = ")
            .bind(settings)
            .push(" WHERE id = ")
            .bind(id)
            .execute(self.on_write())
            .await?;
        if updated == 0 {
            return Err(Error::NotFound(format!("no project {id}")));
        }
        self.project_by_id(id).await
    }

    async fn key_by_id(&self, id: Uuid) -> Result<Option<KeyRow>> {
        let row = Sql::<D>::new(format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = "))
            .bind(id)
            .fetch_optional(self.on_read())
            .await?;
        row.as_ref().map(key).transpose()
    }

    async fn set_key_budget(
        &self,
        project: Uuid,
        id: Uuid,
        budget_usd: Option<f64>,
        budget_period_secs: Option<i64>,
    ) -> Result<bool> {
        let updated = Sql::<D>::new("UPDATE api_keys SET budget_usd = ")
            .bind(budget_usd)
            .push(", budget_period_secs = ")
            .bind(budget_period_secs)
            .push(" WHERE id = ")
            .bind(id)
            .push(" AND project_id = ")
            .bind(project)
            .push(" AND revoked_at IS NULL")
            .execute(self.on_write())
            .await?;
        Ok(updated > 0)
    }

    async fn create_key(&self, key: &KeyRow) -> Result<()> {
        self.insert_key(key, self.on_write()).await
    }

    async fn key_by_digest(&self, digest: &str) -> Result<Option<KeyRow>> {
        let row = Sql::<D>::new(format!(
            "SELECT {KEY_COLUMNS} FROM api_keys WHERE digest = "
        ))
        .bind(digest)
        .fetch_optional(self.on_read())
        .await?;
        row.as_ref().map(key).transpose()
    }

    async fn list_keys(&self, project: Uuid) -> Result<Vec<KeyRow>> {
        let rows = Sql::<D>::new(format!(
            "SELECT {KEY_COLUMNS} FROM api_keys WHERE project_id = "
        ))
        .bind(project)
        .push(" ORDER BY created_at DESC, id DESC")
        .fetch_all(self.on_read())
        .await?;
        rows.iter().map(key).collect()
    }

    async fn revoke_key(&self, project: Uuid, id: Uuid) -> Result<bool> {
        let revoked = revoke::<D>(project, id).execute(self.on_write()).await?;
        Ok(revoked > 0)
    }

    async fn rotate_key(&self, project: Uuid, id: Uuid, new: &KeyRow) -> Result<KeyRow> {
        let mut tx = self.db.writer().begin().await?;
        let revoked = revoke::<D>(project, id).execute(On::Tx(&mut tx)).await?;
        if revoked == 0 {
            return Err(Error::NotFound(format!("no live key {id} in this project")));
        }
        let new = KeyRow {
            project_id: project,
            rotated_from: Some(id),
            ..new.clone()
        };
        self.insert_key(&new, On::Tx(&mut tx)).await?;
        tx.commit().await?;
        Ok(new)
    }
}

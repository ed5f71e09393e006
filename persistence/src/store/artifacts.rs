//! Artifacts' rows (`crate::Artifacts`, docs/artifacts.md) on both backends: which upload is
//! which blob, of which session. A session's purge deletes its rows in its transaction and
//! names the blobs no row names any more ([`unreferenced`]).

use async_trait::async_trait;
use uuid::Uuid;

use super::dialect::{Columns, Dialect, On, Sql};
use super::SqlStore;
use crate::{Artifact, Artifacts, Error, Result};

const COLUMNS: &str =
    "id, sha256, size, content_type, session_id, project_id, created_by, created_at";

fn artifact(row: &impl Columns) -> Result<Artifact> {
    Ok(Artifact {
        id: row.id("id")?,
        sha256: row.text("sha256")?,
        size: row.int("size")?,
        content_type: row.text("content_type")?,
        session_id: row.opt_id("session_id")?,
        project_id: row.id("project_id")?,
        created_by: row.text("created_by")?,
        created_at: row.time("created_at")?,
    })
}

/// Whether an artifact row names blob `sha256`.
pub(super) async fn named<D: Dialect>(on: On<'_, D::Db>, sha256: &str) -> Result<bool> {
    let row = Sql::<D>::new("SELECT id FROM artifacts WHERE sha256 = ")
        .bind(sha256)
        .push(" LIMIT 1")
        .fetch_optional(on)
        .await?;
    Ok(row.is_some())
}

#[async_trait]
impl<D: Dialect> Artifacts for SqlStore<D> {
    async fn insert_artifact(&self, a: &Artifact) -> Result<()> {
        if let Some(session) = a.session_id {
            self.require_session(session).await?;
        }
        Sql::<D>::new(format!("INSERT INTO artifacts ({COLUMNS}) VALUES ("))
            .bind(a.id)
            .push(", ")
            .bind(a.sha256.as_str())
            .push(", ")
            .bind(a.size)
            .push(", ")
            .bind(a.content_type.as_str())
            .push(", ")
            .bind(a.session_id)
            .push(", ")
            .bind(a.project_id)
            .push(", ")
            .bind(a.created_by.as_str())
            .push(", ")
            .bind(a.created_at)
            .push(")")
            .execute(self.on_write())
            .await?;
        Ok(())
    }

    async fn get_artifact(&self, id: Uuid) -> Result<Artifact> {
        let row = Sql::<D>::new(format!("SELECT {COLUMNS} FROM artifacts WHERE id = "))
            .bind(id)
            .fetch_optional(self.on_read())
            .await?
            .ok_or_else(|| Error::NotFound(format!("no artifact {id}")))?;
        artifact(&row)
    }

    async fn session_artifacts(&self, session_id: Uuid) -> Result<Vec<Artifact>> {
        let rows = Sql::<D>::new(format!(
            "SELECT {COLUMNS} FROM artifacts WHERE session_id = "
        ))
        .bind(session_id)
        .push(" ORDER BY created_at, id")
        .fetch_all(self.on_read())
        .await?;
        rows.iter().map(artifact).collect()
    }

    async fn unreferenced_blobs(&self, sha256s: &[String]) -> Result<Vec<String>> {
        let mut free = Vec::new();
        for sha256 in sha256s {
            if !named::<D>(self.on_read(), sha256).await? {
                free.push(sha256.clone());
            }
        }
        Ok(free)
    }
}

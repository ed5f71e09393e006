//! Datasets, cases, runs and results on both backends (`crate::evals`).

use async_trait::async_trait;
use serde_json::Value;
use uuid::Uuid;

use super::dialect::{Columns, Dialect, On, Sql};
use super::SqlStore;
use crate::evals::{
    CaseRow, DatasetRow, EvalResultRow, EvalRunRow, EvalStatus, FeedbackRow, Rating,
};
use crate::types::now_micros;
use crate::{Error, Evals, Result};

const DATASET_COLUMNS: &str = "name, version, cases, created_at, updated_at";
const RUN_COLUMNS: &str = "id, project_id, dataset, dataset_version, settings, status, total, \
                           done, passed, error, created_at, finished_at";
const NEW_RUN_COLUMNS: &str = "id, project_id, dataset, dataset_version, settings, status, total, \
                               done, passed, error, created_at";

fn dataset(row: &impl Columns) -> Result<DatasetRow> {
    Ok(DatasetRow {
        name: row.text("name")?,
        version: row.int("version")?,
        cases: row.int("cases")?,
        created_at: row.time("created_at")?,
        updated_at: row.time("updated_at")?,
    })
}

fn run(row: &impl Columns) -> Result<EvalRunRow> {
    let status = row.text("status")?;
    Ok(EvalRunRow {
        id: row.id("id")?,
        project_id: row.id("project_id")?,
        dataset: row.text("dataset")?,
        dataset_version: row.int("dataset_version")?,
        settings: row.json("settings")?,
        status: EvalStatus::parse(&status)
            .ok_or_else(|| Error::Corrupt(format!("eval run status `{status}`")))?,
        total: row.int("total")?,
        done: row.int("done")?,
        passed: row.int("passed")?,
        error: row.opt_text("error")?,
        created_at: row.time("created_at")?,
        finished_at: row.opt_time("finished_at")?,
    })
}

const FEEDBACK_COLUMNS: &str =
    "id, session_id, seq, rating, note, correction, created_by, created_at";

fn feedback(row: &impl Columns) -> Result<FeedbackRow> {
    let rating = row.text("rating")?;
    Ok(FeedbackRow {
        id: row.id("id")?,
        session_id: row.id("session_id")?,
        seq: row.int("seq")?,
        rating: Rating::parse(&rating)
            .ok_or_else(|| Error::Corrupt(format!("feedback rating `{rating}`")))?,
        note: row.text("note")?,
        correction: row.opt_text("correction")?,
        created_by: row.text("created_by")?,
        created_at: row.time("created_at")?,
    })
}

impl<D: Dialect> SqlStore<D> {
    async fn dataset_row(
        &self,
        project: Uuid,
        name: &str,
        on: On<'_, D::Db>,
    ) -> Result<DatasetRow> {
        let row = Sql::<D>::new(format!(
            "SELECT {DATASET_COLUMNS} FROM eval_datasets WHERE "
        ))
        .named("name", project, name)
        .fetch_optional(on)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no dataset is named `{name}`")))?;
        dataset(&row)
    }
}

#[async_trait]
impl<D: Dialect> Evals for SqlStore<D> {
    async fn create_dataset(&self, project: Uuid, name: &str) -> Result<DatasetRow> {
        let now = now_micros();
        let inserted = Sql::<D>::new(
            "INSERT INTO eval_datasets (project_id, name, created_at, updated_at) VALUES (",
        )
        .bind(project)
        .push(", ")
        .bind(name)
        .push(", ")
        .bind(now)
        .push(", ")
        .bind(now)
        .push(") ON CONFLICT (project_id, name) DO NOTHING")
        .execute(self.on_write())
        .await?;
        if inserted == 0 {
            return Err(Error::Exists(format!("dataset `{name}` exists")));
        }
        self.dataset_row(project, name, self.on_write()).await
    }

    async fn get_dataset(&self, project: Uuid, name: &str) -> Result<DatasetRow> {
        self.dataset_row(project, name, self.on_read()).await
    }

    async fn list_datasets(&self, project: Uuid) -> Result<Vec<DatasetRow>> {
        let rows = Sql::<D>::new(format!(
            "SELECT {DATASET_COLUMNS} FROM eval_datasets WHERE project_id = "
        ))
        .bind(project)
        .push(" ORDER BY name")
        .fetch_all(self.on_read())
        .await?;
        rows.iter().map(dataset).collect()
    }

    async fn delete_dataset(&self, project: Uuid, name: &str) -> Result<bool> {
        let deleted = Sql::<D>::new("DELETE FROM eval_datasets WHERE ")
            .named("name", project, name)
            .execute(self.on_write())
            .await?;
        Ok(deleted > 0)
    }

    async fn add_cases(
        &self,
        project: Uuid,
        name: &str,
        cases: &[(Uuid, Value)],
    ) -> Result<DatasetRow> {
        let mut tx = self.db.writer().begin().await?;
        let row = self.dataset_row(project, name, On::Tx(&mut tx)).await?;
        let now = now_micros();
        for (i, (id, body)) in cases.iter().enumerate() {
            Sql::<D>::new(
                "INSERT INTO eval_cases (project_id, dataset, id, position, body, created_at) \
                 VALUES (",
            )
            .bind(project)
            .push(", ")
            .bind(name)
            .push(", ")
            .bind(*id)
            .push(", ")
            .bind(row.cases + i as i64)
            .push(", ")
            .bind(body)
            .push(", ")
            .bind(now)
            .push(")")
            .execute(On::Tx(&mut tx))
            .await?;
        }
        Sql::<D>::new("UPDATE eval_datasets SET cases = cases + ")
            .bind(cases.len() as i64)
            .push(", version = version + 1, updated_at = ")
            .bind(now)
            .push(" WHERE ")
            .named("name", project, name)
            .execute(On::Tx(&mut tx))
            .await?;
        let row = self.dataset_row(project, name, On::Tx(&mut tx)).await?;
        tx.commit().await?;
        Ok(row)
    }

    async fn dataset_cases(&self, project: Uuid, name: &str) -> Result<Vec<CaseRow>> {
        let rows = Sql::<D>::new("SELECT id, position, body FROM eval_cases WHERE ")
            .named("dataset", project, name)
            .push(" ORDER BY position, id")
            .fetch_all(self.on_read())
            .await?;
        rows.iter()
            .map(|row| {
                Ok(CaseRow {
                    id: row.id("id")?,
                    position: row.int("position")?,
                    body: row.json("body")?,
                })
            })
            .collect()
    }

    async fn create_eval_run(&self, run: &EvalRunRow) -> Result<()> {
        Sql::<D>::new(format!(
            "INSERT INTO eval_runs ({NEW_RUN_COLUMNS}) VALUES ("
        ))
        .bind(run.id)
        .push(", ")
        .bind(run.project_id)
        .push(", ")
        .bind(run.dataset.as_str())
        .push(", ")
        .bind(run.dataset_version)
        .push(", ")
        .bind(&run.settings)
        .push(", ")
        .bind(run.status.as_str())
        .push(", ")
        .bind(run.total)
        .push(", ")
        .bind(run.done)
        .push(", ")
        .bind(run.passed)
        .push(", ")
        .bind(run.error.clone())
        .push(", ")
        .bind(run.created_at)
        .push(")")
        .execute(self.on_write())
        .await?;
        Ok(())
    }

    async fn put_eval_result(&self, run_id: Uuid, result: &EvalResultRow) -> Result<()> {
        let mut tx = self.db.writer().begin().await?;
        let inserted = Sql::<D>::new(
            "INSERT INTO eval_results (run_id, case_id, position, passed, body) VALUES (",
        )
        .bind(run_id)
        .push(", ")
        .bind(result.case_id)
        .push(", ")
        .bind(result.position)
        .push(", ")
        .bind(result.passed)
        .push(", ")
        .bind(&result.body)
        .push(") ON CONFLICT (run_id, case_id) DO NOTHING")
        .execute(On::Tx(&mut tx))
        .await?;
        if inserted > 0 {
            Sql::<D>::new("UPDATE eval_runs SET done = done + 1, passed = passed + ")
                .bind(i64::from(result.passed))
                .push(" WHERE id = ")
                .bind(run_id)
                .execute(On::Tx(&mut tx))
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn finish_eval_run(
        &self,
        run_id: Uuid,
        status: EvalStatus,
        error: Option<String>,
    ) -> Result<()> {
        Sql::<D>::new("UPDATE eval_runs SET status = ")
            .bind(status.as_str())
            .push(", error = ")
            .bind(error)
            .push(", finished_at = ")
            .bind(now_micros())
            .push(" WHERE id = ")
            .bind(run_id)
            .execute(self.on_write())
            .await?;
        Ok(())
    }

    async fn get_eval_run(&self, run_id: Uuid) -> Result<EvalRunRow> {
        let row = Sql::<D>::new(format!("SELECT {RUN_COLUMNS} FROM eval_runs WHERE id = "))
            .bind(run_id)
            .fetch_optional(self.on_read())
            .await?
            .ok_or_else(|| Error::NotFound(format!("no evaluation run {run_id}")))?;
        run(&row)
    }

    async fn list_eval_runs(
        &self,
        project: Uuid,
        dataset: Option<&str>,
        limit: u32,
    ) -> Result<Vec<EvalRunRow>> {
        let mut sql = Sql::<D>::new(format!(
            "SELECT {RUN_COLUMNS} FROM eval_runs WHERE project_id = "
        ));
        sql.bind(project);
        if let Some(dataset) = dataset {
            sql.push(" AND dataset = ").bind(dataset);
        }
        sql.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .bind(i64::from(limit.clamp(1, crate::MAX_PAGE)));
        let rows = sql.fetch_all(self.on_read()).await?;
        rows.iter().map(run).collect()
    }

    async fn tag_eval_session(&self, session: Uuid, run: Uuid) -> Result<()> {
        Sql::<D>::new("UPDATE sessions SET eval_run = ")
            .bind(run)
            .push(" WHERE id = ")
            .bind(session)
            .execute(self.on_write())
            .await?;
        Ok(())
    }

    async fn eval_results(&self, run_id: Uuid) -> Result<Vec<EvalResultRow>> {
        let rows = Sql::<D>::new(
            "SELECT case_id, position, passed, body FROM eval_results WHERE run_id = ",
        )
        .bind(run_id)
        .push(" ORDER BY position, case_id")
        .fetch_all(self.on_read())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(EvalResultRow {
                    case_id: row.id("case_id")?,
                    position: row.int("position")?,
                    passed: row.flag("passed")?,
                    body: row.json("body")?,
                })
            })
            .collect()
    }

    async fn add_feedback(&self, row: &FeedbackRow) -> Result<()> {
        Sql::<D>::new(format!(
            "INSERT INTO feedback ({FEEDBACK_COLUMNS}, project_id) VALUES ("
        ))
        .bind(row.id)
        .push(", ")
        .bind(row.session_id)
        .push(", ")
        .bind(row.seq)
        .push(", ")
        .bind(row.rating.as_str())
        .push(", ")
        .bind(row.note.as_str())
        .push(", ")
        .bind(row.correction.clone())
        .push(", ")
        .bind(row.created_by.as_str())
        .push(", ")
        .bind(row.created_at)
        // A rating belongs to its session's project.
        .push(", COALESCE((SELECT project_id FROM sessions WHERE id = ")
        .bind(row.session_id)
        .push("), ")
        .bind(crate::DEFAULT_PROJECT)
        .push("))")
        .execute(self.on_write())
        .await?;
        Ok(())
    }

    async fn get_feedback(&self, id: Uuid) -> Result<FeedbackRow> {
        let row = Sql::<D>::new(format!(
            "SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE id = "
        ))
        .bind(id)
        .fetch_optional(self.on_read())
        .await?
        .ok_or_else(|| Error::NotFound(format!("no feedback {id}")))?;
        feedback(&row)
    }

    async fn list_feedback(
        &self,
        scope: crate::Scope,
        session: Option<Uuid>,
        rating: Option<Rating>,
        limit: u32,
    ) -> Result<Vec<FeedbackRow>> {
        let mut sql = Sql::<D>::new(format!(
            "SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE TRUE"
        ));
        if let Some(project) = scope.project() {
            sql.push(" AND project_id = ").bind(project);
        }
        if let Some(session) = session {
            sql.push(" AND session_id = ").bind(session);
        }
        if let Some(rating) = rating {
            sql.push(" AND rating = ").bind(rating.as_str());
        }
        sql.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .bind(i64::from(limit.clamp(1, crate::MAX_PAGE)));
        let rows = sql.fetch_all(self.on_read()).await?;
        rows.iter().map(feedback).collect()
    }
}

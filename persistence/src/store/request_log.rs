//! The request log as stored: batched inserts, filtered newest-first pages and the rows its
//! statistics are computed from.

use chrono::{DateTime, Utc};

use super::dialect::{Arg, Columns, Dialect, On, Sql};
use super::rows::{self, LOG_COLUMNS};
use super::SqlStore;
use crate::request_log::{
    compute_stats, into_log_page, RequestLogEntry, RequestLogPage, RequestLogQuery, SpendRow,
    SpendScope, StatsGroupBy, StatsRow, LOG_ROWS_PER_STATEMENT, MAX_STATS_ROWS,
};
use crate::Result;

/// An entry's values, in the order of [`LOG_COLUMNS`].
fn log_values(e: &RequestLogEntry) -> [Arg; 20] {
    [
        e.id.into(),
        e.at.into(),
        e.session_id.into(),
        e.api_key.clone().into(),
        e.route.clone().into(),
        e.provider.clone().into(),
        e.model.clone().into(),
        e.status.as_str().into(),
        serde_json::to_value(&e.attempts).unwrap_or_default().into(),
        e.latency_ms.into(),
        e.ttft_ms.into(),
        i64::try_from(e.tokens_in).unwrap_or(i64::MAX).into(),
        i64::try_from(e.tokens_out).unwrap_or(i64::MAX).into(),
        e.cost.into(),
        e.cache_hit.into(),
        e.stream.into(),
        serde_json::Value::Object(e.metadata.clone()).into(),
        e.error.clone().into(),
        (&e.bodies).into(),
        serde_json::to_value(&e.guardrails)
            .unwrap_or_default()
            .into(),
    ]
}

/// The filters of a request-log query.
fn push_log_filters<D: Dialect>(sql: &mut Sql<D>, query: &RequestLogQuery) -> Result<()> {
    for (column, value) in [
        ("route", &query.route),
        ("provider", &query.provider),
        ("model", &query.model),
        ("status", &query.status),
        ("api_key", &query.api_key),
    ] {
        if let Some(value) = value {
            sql.push(format!(" AND {column} = ")).bind(value.as_str());
        }
    }
    if let Some(session) = query.session_id {
        sql.push(" AND session_id = ").bind(session);
    }
    if let Some(hit) = query.cache_hit {
        sql.push(" AND cache_hit = ").bind(hit);
    }
    if let Some(since) = query.since {
        sql.push(" AND at >= ").bind(since);
    }
    if let Some(until) = query.until {
        sql.push(" AND at < ").bind(until);
    }
    if let Some((key, value)) = &query.metadata {
        sql.push(" AND ");
        D::push_json_text(sql, "metadata", RequestLogQuery::metadata_key(key)?);
        sql.push(" = ").bind(value.as_str());
    }
    if let Some(scope) = &query.scope {
        sql.push(" AND ");
        push_scope(sql, scope);
    }
    Ok(())
}

/// `(…)`: the row was charged within `scope` (a project's keys, its signed-in people, and for
/// the installation's project whatever no virtual key or project's person was charged).
fn push_scope<D: Dialect>(sql: &mut Sql<D>, scope: &SpendScope) {
    sql.push("(FALSE");
    if !scope.api_keys.is_empty() {
        sql.push(" OR api_key IN ").list(&scope.api_keys);
    }
    if let Some(prefix) = &scope.prefix {
        sql.push(" OR ");
        D::push_starts_with(sql, "api_key", prefix);
    }
    if scope.installation {
        // Charged to no virtual key and to no project's signed-in person.
        sql.push(" OR api_key IS NULL OR NOT (");
        D::push_starts_with(sql, "api_key", "key:");
        sql.push(" OR ");
        D::push_starts_with(sql, "api_key", "user:");
        sql.push(")");
    }
    sql.push(")");
}

impl<D: Dialect> SqlStore<D> {
    /// Inserts the entries in one transaction; an id already stored is skipped.
    pub(super) async fn insert_log(&self, entries: &[RequestLogEntry]) -> Result<()> {
        let mut tx = self.db.writer().begin().await?;
        for chunk in entries.chunks(LOG_ROWS_PER_STATEMENT) {
            Sql::<D>::new(format!("INSERT INTO request_log ({LOG_COLUMNS}) "))
                .values(chunk, log_values)
                .push(" ON CONFLICT (id) DO NOTHING")
                .execute(On::Tx(&mut tx))
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn list_log(&self, query: &RequestLogQuery) -> Result<RequestLogPage> {
        let limit = query.page_size();
        let mut sql = Sql::<D>::new(format!("SELECT {LOG_COLUMNS} FROM request_log WHERE TRUE"));
        push_log_filters(&mut sql, query)?;
        if let Some(cursor) = query.cursor_id()? {
            sql.push(" AND id < ").bind(cursor);
        }
        sql.push(" ORDER BY id DESC LIMIT ")
            .bind(i64::from(limit) + 1);
        let rows = sql.fetch_all(self.on_read()).await?;
        let entries = rows
            .iter()
            .map(rows::log_entry)
            .collect::<Result<Vec<_>>>()?;
        Ok(into_log_page(entries, limit))
    }

    /// The calls charged within `scope` in `[since, until)`, newest first.
    pub(super) async fn log_spend(
        &self,
        scope: &SpendScope,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<SpendRow>> {
        let mut sql = Sql::<D>::new(
            "SELECT at, api_key, route, model, session_id, cost, tokens_in, tokens_out, metadata \
             FROM request_log WHERE ",
        );
        push_scope(&mut sql, scope);
        // A call refused by a limit or a budget reached no provider: it spent nothing.
        sql.push(" AND status NOT IN ('rate_limited', 'budget_exceeded') AND at >= ")
            .bind(since)
            .push(" AND at < ")
            .bind(until)
            .push(" ORDER BY id DESC LIMIT ")
            .bind(MAX_STATS_ROWS);
        let rows = sql.fetch_all(self.on_read()).await?;
        rows.iter()
            .map(|row| {
                let metadata = match row.json("metadata")? {
                    serde_json::Value::Object(map) => map,
                    _ => Default::default(),
                };
                Ok(SpendRow {
                    at: row.time("at")?,
                    api_key: row.opt_text("api_key")?,
                    route: row.text("route")?,
                    model: row.opt_text("model")?,
                    session_id: row.opt_id("session_id")?,
                    cost: row.real("cost")?,
                    tokens_in: row.int("tokens_in")?,
                    tokens_out: row.int("tokens_out")?,
                    metadata,
                })
            })
            .collect()
    }

    pub(super) async fn log_stats(
        &self,
        query: &RequestLogQuery,
        group_by: &StatsGroupBy,
    ) -> Result<Vec<StatsRow>> {
        let mut sql = Sql::<D>::new("SELECT ");
        match group_by {
            StatsGroupBy::Route => sql.push("route"),
            StatsGroupBy::Provider => sql.push("provider"),
            StatsGroupBy::Model => sql.push("model"),
            StatsGroupBy::Metadata(key) => {
                D::push_json_text(&mut sql, "metadata", RequestLogQuery::metadata_key(key)?);
                &mut sql
            }
        };
        sql.push(
            " AS key, status, cache_hit, latency_ms, ttft_ms, tokens_in, tokens_out, cost \
             FROM request_log WHERE TRUE",
        );
        push_log_filters(&mut sql, query)?;
        sql.push(" ORDER BY id DESC LIMIT ").bind(MAX_STATS_ROWS);
        let rows = sql.fetch_all(self.on_read()).await?;
        let inputs = rows
            .iter()
            .map(rows::stats_input)
            .collect::<Result<Vec<_>>>()?;
        Ok(compute_stats(inputs))
    }
}

//! `GET /v1/projects/{project}/spend` (docs/tenancy.md, "Spend"): what a project's keys and
//! the sessions they created spent — over time, by key, route, model and (optionally) a
//! metadata entry, its costliest sessions — and its budgets with what is left of them. For the
//! installation's keys and the project's admins. Read from the request log — calls charged to
//! the project's keys (revoked ones included) and its signed-in people; the default project,
//! being the installation's, also holds what no virtual key was charged for — and the budget
//! ledger.

use std::collections::HashMap;

use chrono::{DateTime, Duration, DurationRound, Utc};
use serde::Serialize;
use stead_persistence::request_log::{RequestLogQuery, SpendRow, SpendScope};
use stead_persistence::tenancy::{Budget, KeyRow};

use super::projects::managed;
use super::*;
use crate::auth::budgets::{key_budget, project_budget};

/// Spend of one group.
#[derive(Serialize, ToSchema, Default, Clone)]
pub struct SpendLine {
    /// The group: a key's name, a route, a model, a metadata value, a session id (`null`: rows
    /// without one).
    pub name: Option<String>,
    pub cost: f64,
    pub requests: u64,
    pub tokens_in: i64,
    pub tokens_out: i64,
}

/// Spend in one time bucket.
#[derive(Serialize, ToSchema)]
pub struct SpendPoint {
    pub at: DateTime<Utc>,
    pub cost: f64,
    pub requests: u64,
}

/// A budget and what is left of it in its current window.
#[derive(Serialize, ToSchema)]
pub struct BudgetLeft {
    /// ``project `acme` ``, ``key `ci` ``.
    pub name: String,
    pub usd: f64,
    pub period_secs: Option<i64>,
    /// Spent in the current window (reservations of running calls not included).
    pub spent: f64,
    /// `1 - spent / usd`, at least 0 (`null` for a budget of 0).
    pub remaining_share: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub struct SpendReport {
    pub project_id: Uuid,
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// The width of `over_time`'s buckets (an hour up to 2 days, else a day).
    pub bucket_secs: i64,
    pub total: SpendLine,
    pub over_time: Vec<SpendPoint>,
    pub by_key: Vec<SpendLine>,
    pub by_route: Vec<SpendLine>,
    pub by_model: Vec<SpendLine>,
    /// By the metadata entry `group_by` names (`metadata.customer`); empty without it.
    pub by_metadata: Vec<SpendLine>,
    /// The ten costliest sessions (`name`: the session id).
    pub top_sessions: Vec<SpendLine>,
    pub budgets: Vec<BudgetLeft>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SpendQuery {
    /// Days back from now (1–366, default 30).
    #[param(minimum = 1, maximum = 366)]
    days: Option<u32>,
    /// `metadata.KEY`: also group by this metadata entry.
    group_by: Option<String>,
}

fn add(line: &mut SpendLine, row: &SpendRow) {
    line.cost += row.cost;
    line.requests += 1;
    line.tokens_in += row.tokens_in;
    line.tokens_out += row.tokens_out;
}

/// Groups `rows` by `key`, costliest first.
fn grouped(rows: &[SpendRow], key: impl Fn(&SpendRow) -> Option<String>) -> Vec<SpendLine> {
    let mut groups: HashMap<Option<String>, SpendLine> = HashMap::new();
    for row in rows {
        let name = key(row);
        let line = groups.entry(name.clone()).or_insert_with(|| SpendLine {
            name,
            ..Default::default()
        });
        add(line, row);
    }
    let mut lines: Vec<SpendLine> = groups.into_values().collect();
    lines.sort_by(|a, b| b.cost.total_cmp(&a.cost).then_with(|| a.name.cmp(&b.name)));
    lines
}

/// Buckets of `width` from `since` to `until`, every one present (zero where nothing was spent).
fn over_time(
    rows: &[SpendRow],
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    width: Duration,
) -> Vec<SpendPoint> {
    let start = since.duration_trunc(width).unwrap_or(since);
    let count = ((until - start).num_seconds() / width.num_seconds()).max(0) as usize + 1;
    let mut points: Vec<SpendPoint> = (0..count)
        .map(|i| SpendPoint {
            at: start + width * i as i32,
            cost: 0.0,
            requests: 0,
        })
        .collect();
    for row in rows {
        let i = ((row.at - start).num_seconds() / width.num_seconds()).max(0) as usize;
        if let Some(point) = points.get_mut(i) {
            point.cost += row.cost;
            point.requests += 1;
        }
    }
    points
}

fn left(name: String, budget: Budget, spent: f64) -> BudgetLeft {
    BudgetLeft {
        name,
        usd: budget.usd,
        period_secs: budget.period_secs,
        spent,
        remaining_share: (budget.usd > 0.0).then(|| (1.0 - spent / budget.usd).max(0.0)),
    }
}

/// The project's budget and its keys' (live ones), with their spending in the current window.
async fn budgets(
    state: &AppState,
    project: &stead_persistence::tenancy::ProjectRow,
    keys: &[KeyRow],
) -> Result<Vec<BudgetLeft>, ApiError> {
    let mut wanted: Vec<(String, String, Budget)> = Vec::new();
    if let Some(budget) = project.budget() {
        wanted.push((
            project_budget(project.id),
            format!("project `{}`", project.name),
            budget,
        ));
    }
    for key in keys.iter().filter(|k| k.revoked_at.is_none()) {
        if let Some(budget) = key.budget() {
            wanted.push((key_budget(key.id), format!("key `{}`", key.name), budget));
        }
    }
    let ledger_keys: Vec<String> = wanted.iter().map(|(k, _, _)| k.clone()).collect();
    let spending = state.store.budget_spending(&ledger_keys).await?;
    let now = Utc::now();
    Ok(wanted
        .into_iter()
        .map(|(ledger, name, budget)| {
            // A window that ran out starts again at the next call: nothing is spent in it.
            let spent = spending
                .iter()
                .find(|(k, _, _)| *k == ledger)
                .filter(|(_, _, start)| match budget.period_secs {
                    Some(secs) if secs > 0 => *start + Duration::seconds(secs) > now,
                    _ => true,
                })
                .map_or(0.0, |(_, spent, _)| *spent);
            left(name, budget, spent)
        })
        .collect())
}

#[utoipa::path(get, path = "/v1/projects/{project}/spend", params(("project" = String, Path, description = "Project name or id"), SpendQuery), responses((status = 200, body = SpendReport), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn spend(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(project): ApiPath<String>,
    ApiQuery(query): ApiQuery<SpendQuery>,
) -> Result<Json<SpendReport>, ApiError> {
    let project = managed(&state, &caller, &project).await?;
    let days = query.days.unwrap_or(30);
    if !(1..=366).contains(&days) {
        return Err(ApiError::new(ErrorCode::InvalidQuery, "`days` is 1 to 366"));
    }
    let group = match &query.group_by {
        None => None,
        Some(g) => Some(
            g.strip_prefix("metadata.")
                .and_then(|key| RequestLogQuery::metadata_key(key).ok())
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::InvalidQuery,
                        "`group_by` is metadata.KEY (letters, digits, `_`, `-`, `.`)",
                    )
                })?
                .to_string(),
        ),
    };
    let until = Utc::now();
    let since = until - Duration::days(i64::from(days));
    let (scope, keys) = spend_scope(&state, project.id).await?;
    let names: HashMap<String, String> = keys
        .iter()
        .map(|k| (format!("key:{}", k.id), k.name.clone()))
        .collect();
    let rows = state.store.spend_rows(&scope, since, until).await?;
    let width = if days <= 2 {
        Duration::hours(1)
    } else {
        Duration::days(1)
    };
    let mut total = SpendLine::default();
    for row in &rows {
        add(&mut total, row);
    }
    let by_metadata = match &group {
        Some(key) => grouped(&rows, |r| {
            r.metadata.get(key).map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        }),
        None => Vec::new(),
    };
    let mut top_sessions = grouped(&rows, |r| r.session_id.map(|id| id.to_string()));
    top_sessions.retain(|line| line.name.is_some());
    top_sessions.truncate(10);
    Ok(Json(SpendReport {
        project_id: project.id,
        since,
        until,
        bucket_secs: width.num_seconds(),
        total,
        over_time: over_time(&rows, since, until, width),
        // A virtual key by its name; anything else as charged (`local`, a configured key's
        // fingerprint, `user:{project}:{name}`).
        by_key: grouped(&rows, |r| {
            r.api_key
                .as_ref()
                .map(|k| names.get(k).cloned().unwrap_or_else(|| k.clone()))
        }),
        by_route: grouped(&rows, |r| Some(r.route.clone())),
        by_model: grouped(&rows, |r| r.model.clone()),
        by_metadata,
        top_sessions,
        budgets: budgets(&state, &project, &keys).await?,
    }))
}

/// Whose calls are `project`'s (its keys, its signed-in people; the installation's project also
/// what no virtual key was charged), with its keys (revoked ones too).
pub(crate) async fn spend_scope(
    state: &AppState,
    project: Uuid,
) -> Result<(SpendScope, Vec<KeyRow>), ApiError> {
    let keys = state.store.list_keys(project).await?;
    let scope = SpendScope {
        api_keys: keys.iter().map(|k| format!("key:{}", k.id)).collect(),
        prefix: Some(format!("user:{project}:")),
        installation: project == stead_persistence::DEFAULT_PROJECT,
    };
    Ok((scope, keys))
}

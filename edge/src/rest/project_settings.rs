//! `PATCH /v1/projects/{project}` (docs/tenancy.md): what the installation grants a project —
//! its budget, and which of the installation's agents and routes it may use. The installation's
//! keys only (the role check refuses project keys): these cap what the project's admins hand
//! out. A JSON merge patch: a field left out stays as it is, `null` clears it.

use serde::{Deserialize, Deserializer};
use stead_persistence::tenancy::Budget;
use utoipa::ToSchema;

use super::projects::{budget, managed, ProjectView};
use super::*;
use crate::audit::{AuditNote, Noted};

/// `Some(value)` for a field that is present (`Some(None)` for `null`), `None` for one left out.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// What to change of a project (fields left out stay as they are).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetProject {
    /// USD per `budget_period` (`null`: no budget).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>)]
    budget_usd: Option<Option<f64>>,
    /// A number and `s`, `m`, `h` or `d`, with `budget_usd` (absent: it never starts again).
    #[serde(default)]
    budget_period: Option<String>,
    /// The agents the project may use (`null`: all of the installation's).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    agents: Option<Option<Vec<String>>>,
    /// The routes the project may use (`null`: all of the installation's).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    routes: Option<Option<Vec<String>>>,
}

/// A list whose every name is one `known` holds.
fn checked(
    what: &str,
    list: &Option<Vec<String>>,
    known: impl Fn(&str) -> bool,
) -> Result<(), ApiError> {
    match list.iter().flatten().find(|name| !known(name)) {
        Some(name) => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("no {what} is named `{name}`"),
        )),
        None => Ok(()),
    }
}

#[utoipa::path(patch, path = "/v1/projects/{project}", params(("project" = String, Path, description = "Project name or id")), request_body = SetProject, responses((status = 200, body = ProjectView), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_project(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(project): ApiPath<String>,
    ApiJson(body): ApiJson<SetProject>,
) -> Result<Noted<Json<ProjectView>>, ApiError> {
    caller.require_installation()?;
    let mut project = managed(&state, &caller, &project).await?;
    if body.budget_usd.is_none() && body.budget_period.is_some() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "`budget_period` needs a `budget_usd`",
        ));
    }
    if let Some(agents) = &body.agents {
        checked("agent", agents, |name| state.sessions.agent(name).is_some())?;
    }
    if let Some(routes) = &body.routes {
        checked("route", routes, |name| {
            state.routes.iter().any(|r| r == name)
        })?;
    }
    let mut facts: Vec<(&str, serde_json::Value)> = Vec::new();
    if let Some(usd) = body.budget_usd {
        let (usd, period) = budget(usd, body.budget_period.as_deref())?;
        project.settings = project.settings_with_budget(usd.map(|usd| Budget {
            usd,
            period_secs: period,
        }));
        facts.push(("budget_usd", usd.into()));
        facts.push(("budget_period_secs", period.into()));
    }
    for (name, list) in [("agents", &body.agents), ("routes", &body.routes)] {
        if let Some(list) = list {
            project.settings = project.settings_with_list(name, list.as_deref());
            facts.push((name, list.clone().into()));
        }
    }
    let row = state
        .store
        .set_project_settings(project.id, &project.settings)
        .await?;
    state.keys.forget_project(project.id);
    tracing::info!(project = %project.id, settings = %row.settings, by = %caller.name(),
        "project settings set");
    let note = AuditNote::new(Some(project.id), facts);
    Ok((note, Json(row.into())))
}

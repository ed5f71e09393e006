//! `/v1/projects` and their keys (docs/tenancy.md): the installation's keys make projects; a
//! project's admins (and the installation's) make, list, rotate and revoke its virtual keys. A
//! key's secret is answered once, when it is made; the store keeps its digest.

use chrono::{DateTime, Utc};
use serde::Serialize;
use stead_persistence::tenancy::{KeyRole, KeyRow, ProjectRow};

use super::*;
use crate::audit::{AuditNote, Noted};
use crate::auth::keys;
use crate::Principal;

/// A project.
#[derive(Serialize, ToSchema)]
pub struct ProjectView {
    pub id: Uuid,
    pub name: String,
    /// USD its keys and sessions may spend per `budget_period_secs` (`null`: no budget).
    pub budget_usd: Option<f64>,
    /// The budget's period (`null`: it never starts again).
    pub budget_period_secs: Option<i64>,
    /// The installation's agents the project may use (`null`: all of them).
    pub agents: Option<Vec<String>>,
    /// The installation's routes the project may use (`null`: all of them).
    pub routes: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
}

impl From<ProjectRow> for ProjectView {
    fn from(row: ProjectRow) -> Self {
        let budget = row.budget();
        let (agents, routes) = (row.allowed_agents(), row.allowed_routes());
        ProjectView {
            id: row.id,
            name: row.name,
            budget_usd: budget.map(|b| b.usd),
            budget_period_secs: budget.and_then(|b| b.period_secs),
            agents,
            routes,
            created_at: row.created_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ProjectList {
    pub projects: Vec<ProjectView>,
    /// The next page's `cursor`; `null` on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ProjectsQuery {
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// A virtual key as listed: never its secret, only the characters it starts with.
#[derive(Serialize, ToSchema)]
pub struct KeyView {
    pub id: Uuid,
    pub project_id: Uuid,
    pub name: String,
    #[schema(value_type = String)]
    pub role: KeyRole,
    /// The secret's first characters (`stk_` and 8 more), to tell keys apart.
    pub prefix: String,
    /// The routes it may call (`null`: all).
    pub routes: Option<Vec<String>>,
    /// USD it may spend per `budget_period_secs` (`null`: no budget of its own).
    pub budget_usd: Option<f64>,
    pub budget_period_secs: Option<i64>,
    /// Requests and tokens per minute it may use on each node (`null`: no limit of its own).
    pub rpm: Option<i64>,
    pub tpm: Option<i64>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// The key this one replaced.
    pub rotated_from: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl From<&KeyRow> for KeyView {
    fn from(row: &KeyRow) -> Self {
        KeyView {
            id: row.id,
            project_id: row.project_id,
            name: row.name.clone(),
            role: row.role,
            prefix: row.prefix.clone(),
            routes: row.routes.clone(),
            budget_usd: row.budget_usd,
            budget_period_secs: row.budget_period_secs,
            rpm: row.rpm,
            tpm: row.tpm,
            expires_at: row.expires_at,
            revoked_at: row.revoked_at,
            rotated_from: row.rotated_from,
            created_at: row.created_at,
        }
    }
}

/// A new key with its secret: the only time the secret is shown.
#[derive(Serialize, ToSchema)]
pub struct KeyCreated {
    #[serde(flatten)]
    pub view: KeyView,
    /// The secret (`stk_…`), for `Authorization: Bearer`. It cannot be shown again.
    pub key: String,
}

#[derive(Serialize, ToSchema)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}

#[derive(Serialize, ToSchema)]
pub struct KeyRevoked {
    pub id: Uuid,
    pub revoked: bool,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewProject {
    /// 1 to 64 letters, digits, `.`, `_` and `-`.
    name: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// 1 to 100 characters, to recognise it by.
    name: String,
    /// `admin`, `member`, `viewer` or `inference`.
    #[schema(value_type = String)]
    role: KeyRole,
    /// Only these routes (each must exist).
    #[serde(default)]
    routes: Option<Vec<String>>,
    /// When it stops working.
    #[serde(default)]
    expires_at: Option<DateTime<Utc>>,
    /// USD it may spend (strict, across nodes) per `budget_period`.
    #[serde(default)]
    budget_usd: Option<f64>,
    /// How often the budget starts again: a number and `s`, `m`, `h` or `d` (`30d`); without
    /// it the budget never starts again.
    #[serde(default)]
    budget_period: Option<String>,
    /// Requests per minute it may make (on each node; at least 1).
    #[serde(default)]
    rpm: Option<u32>,
    /// Tokens per minute it may use (on each node; at least 1).
    #[serde(default)]
    tpm: Option<u64>,
}

/// A budget to set: `budget_usd: null` removes it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetBudget {
    budget_usd: Option<f64>,
    /// A number and `s`, `m`, `h` or `d`; absent or `null`: the budget never starts again.
    #[serde(default)]
    budget_period: Option<String>,
}

/// The budget checked: a finite amount ≥ 0 and a period of `N` `s`/`m`/`h`/`d` (in seconds).
pub(super) fn budget(
    usd: Option<f64>,
    period: Option<&str>,
) -> Result<(Option<f64>, Option<i64>), ApiError> {
    let invalid = |message: &str| ApiError::new(ErrorCode::InvalidRequest, message.to_string());
    if usd.is_some_and(|usd| !(usd.is_finite() && usd >= 0.0)) {
        return Err(invalid("`budget_usd` must be a number ≥ 0"));
    }
    let Some(period) = period else {
        return Ok((usd, None));
    };
    if usd.is_none() {
        return Err(invalid("`budget_period` needs a `budget_usd`"));
    }
    let unit = match period.chars().last() {
        Some('s') => 1,
        Some('m') => 60,
        Some('h') => 3_600,
        Some('d') => 86_400,
        _ => 0,
    };
    let count: Option<i64> = period
        .get(..period.len().saturating_sub(1))
        .and_then(|n| n.parse().ok())
        .filter(|n| (1..=36_500 * 86_400).contains(n));
    match count {
        Some(n) if unit > 0 && n.saturating_mul(unit) <= 36_500 * 86_400 => {
            Ok((usd, Some(n * unit)))
        }
        _ => Err(invalid(
            "`budget_period` is a number and `s`, `m`, `h` or `d` (`30d`), at most 100 years",
        )),
    }
}

fn valid_project_name(name: &str) -> Result<(), ApiError> {
    valid_name(name, 64, "project")
}

fn project_not_found(name: &str) -> ApiError {
    ApiError::new(
        ErrorCode::ProjectNotFound,
        format!("no project is named `{name}`"),
    )
}

/// The project the path names (by name or id), if the caller may manage it: the installation
/// any, a project's admin key its own (another project is not found, exactly like a missing
/// one).
pub(super) async fn managed(
    state: &AppState,
    caller: &Principal,
    name: &str,
) -> Result<ProjectRow, ApiError> {
    let found = match Uuid::try_parse(name) {
        Ok(id) => state.store.project_by_id(id).await,
        // No project can have it.
        Err(_) if valid_project_name(name).is_err() => return Err(project_not_found(name)),
        Err(_) => state.store.project_by_name(name).await,
    };
    let row = match found {
        Ok(row) => row,
        Err(stead_persistence::Error::NotFound(_)) => return Err(project_not_found(name)),
        Err(other) => return Err(other.into()),
    };
    match caller {
        Principal::Local | Principal::ApiKey(_) => Ok(row),
        Principal::ProjectKey(_) | Principal::User(_) => match caller.confined_to() {
            Some(project) if project != row.id => Err(project_not_found(name)),
            _ => Ok(row),
        },
        Principal::Session(_) => Err(ApiError::new(
            ErrorCode::Forbidden,
            "a session token only grants access to its own session",
        )),
    }
}

#[utoipa::path(post, path = "/v1/projects", request_body = NewProject, responses((status = 201, body = ProjectView), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "The installation's keys only", body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_project(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(body): ApiJson<NewProject>,
) -> Result<(StatusCode, Noted<Json<ProjectView>>), ApiError> {
    caller.require_installation()?;
    valid_project_name(&body.name)?;
    let row = state
        .store
        .create_project(&body.name)
        .await
        .map_err(|e| match e {
            stead_persistence::Error::Exists(message) => {
                ApiError::new(ErrorCode::ProjectExists, message)
            }
            other => other.into(),
        })?;
    tracing::info!(project = %row.id, name = %row.name, by = %caller.name(), "project created");
    let note = AuditNote::new(Some(row.id), [("name", row.name.clone().into())]);
    Ok((StatusCode::CREATED, (note, Json(row.into()))))
}

/// The installation sees every project, a page at a time by name; a project's admin key its
/// own.
#[utoipa::path(get, path = "/v1/projects", params(ProjectsQuery), responses((status = 200, body = ProjectList), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn list_projects(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<ProjectsQuery>,
) -> Result<Json<ProjectList>, ApiError> {
    caller.require_operator()?;
    let limit = page_limit(query.limit, 100, stead_persistence::MAX_PAGE)?;
    if let Principal::ProjectKey(key) = &caller {
        let own = state.store.project_by_id(key.project).await?;
        return Ok(Json(ProjectList {
            projects: vec![own.into()],
            next_cursor: None,
        }));
    }
    let cursor = query.cursor.as_deref().filter(|c| !c.is_empty());
    // A cursor is a project's name: anything else is not one this server issued.
    if cursor.is_some_and(|c| valid_project_name(c).is_err()) {
        return Err(ApiError::new(
            ErrorCode::InvalidQuery,
            "`cursor` is not one this server issued",
        ));
    }
    let rows = state.store.list_projects(cursor, limit + 1).await?;
    let next_cursor = (rows.len() > limit as usize).then(|| rows[limit as usize - 1].name.clone());
    Ok(Json(ProjectList {
        projects: rows
            .into_iter()
            .take(limit as usize)
            .map(Into::into)
            .collect(),
        next_cursor,
    }))
}

#[utoipa::path(get, path = "/v1/projects/{project}", params(("project" = String, Path, description = "Project name or id")), responses((status = 200, body = ProjectView), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_project(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(project): ApiPath<String>,
) -> Result<Json<ProjectView>, ApiError> {
    Ok(Json(managed(&state, &caller, &project).await?.into()))
}

fn check_new_key(state: &AppState, body: &NewKey) -> Result<(), ApiError> {
    if body.name.is_empty()
        || body.name.chars().count() > 100
        || body.name.chars().any(char::is_control)
    {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "a key's name is 1 to 100 characters, none of them control characters",
        ));
    }
    if let Some(unknown) = body
        .routes
        .iter()
        .flatten()
        .find(|r| !state.routes.contains(r))
    {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("no route is named `{unknown}` (see GET /v1/models)"),
        ));
    }
    if body.expires_at.is_some_and(|at| at <= Utc::now()) {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "`expires_at` is in the past",
        ));
    }
    budget(body.budget_usd, body.budget_period.as_deref())?;
    if body.rpm == Some(0) || body.tpm == Some(0) {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "`rpm` and `tpm` are at least 1 (leave them out for no limit)",
        ));
    }
    Ok(())
}

/// A key made by a project's key may not reach further than the key that makes it: its routes
/// are among the maker's (the maker's when it names none), and it expires no later.
fn within_caller(caller: &Principal, mut body: NewKey) -> Result<NewKey, ApiError> {
    let Principal::ProjectKey(maker) = caller else {
        return Ok(body);
    };
    let refuse = |message: &str| ApiError::new(ErrorCode::InvalidRequest, message.to_string());
    if let Some(allowed) = &maker.routes {
        match &body.routes {
            None => body.routes = Some(allowed.clone()),
            Some(asked) if asked.iter().all(|r| allowed.contains(r)) => {}
            Some(_) => return Err(refuse("a key may only get routes its maker's key has")),
        }
    }
    if let Some(limit) = maker.expires_at {
        match body.expires_at {
            None => body.expires_at = Some(limit),
            Some(at) if at <= limit => {}
            Some(_) => return Err(refuse("a key may not outlive the key that makes it")),
        }
    }
    Ok(body)
}

/// A row for a new key of `project` with a fresh secret (`body` checked).
fn new_key(project: Uuid, body: &NewKey, rotated_from: Option<Uuid>) -> (KeyRow, String) {
    let minted = keys::mint();
    let (budget_usd, budget_period_secs) =
        budget(body.budget_usd, body.budget_period.as_deref()).unwrap_or_default();
    let row = KeyRow {
        id: Uuid::now_v7(),
        project_id: project,
        name: body.name.clone(),
        role: body.role,
        prefix: minted.prefix,
        digest: minted.digest,
        routes: body.routes.clone(),
        budget_usd,
        budget_period_secs,
        rpm: body.rpm.map(i64::from),
        tpm: body.tpm.and_then(|n| i64::try_from(n).ok()),
        expires_at: body.expires_at,
        revoked_at: None,
        rotated_from,
        created_at: stead_persistence::stored_now(),
    };
    (row, minted.secret)
}

#[utoipa::path(post, path = "/v1/projects/{project}/keys", params(("project" = String, Path, description = "Project name or id")), request_body = NewKey, responses((status = 201, body = KeyCreated), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_key(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(project): ApiPath<String>,
    ApiJson(body): ApiJson<NewKey>,
) -> Result<(StatusCode, Noted<Json<KeyCreated>>), ApiError> {
    let project = managed(&state, &caller, &project).await?;
    let body = within_caller(&caller, body)?;
    check_new_key(&state, &body)?;
    let (row, secret) = new_key(project.id, &body, None);
    state.store.create_key(&row).await?;
    tracing::info!(project = %project.id, key = %row.id, prefix = %row.prefix,
        role = row.role.as_str(), by = %caller.name(), "key created");
    let note = AuditNote::new(
        Some(project.id),
        [
            ("key_id", row.id.to_string().into()),
            ("name", row.name.clone().into()),
            ("role", row.role.as_str().into()),
            ("budget_usd", row.budget_usd.into()),
        ],
    );
    let created = KeyCreated {
        view: (&row).into(),
        key: secret,
    };
    Ok((StatusCode::CREATED, (note, Json(created))))
}

#[utoipa::path(get, path = "/v1/projects/{project}/keys", params(("project" = String, Path, description = "Project name or id")), responses((status = 200, body = KeyList), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list_keys(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(project): ApiPath<String>,
) -> Result<Json<KeyList>, ApiError> {
    let project = managed(&state, &caller, &project).await?;
    let rows = state.store.list_keys(project.id).await?;
    Ok(Json(KeyList {
        keys: rows.iter().map(Into::into).collect(),
    }))
}

/// The live key `id` of the project, or the 404 of a missing one.
async fn live_key(state: &AppState, project: Uuid, id: Uuid) -> Result<KeyRow, ApiError> {
    state
        .store
        .key_by_id(id)
        .await?
        .filter(|k| k.project_id == project && k.revoked_at.is_none())
        .ok_or_else(|| ApiError::new(ErrorCode::KeyNotFound, format!("no live key {id}")))
}

/// Replaces a key: a new secret with the same name, role and routes; the old key stops working
/// at once on this node and within seconds on the others (docs/tenancy.md).
#[utoipa::path(post, path = "/v1/projects/{project}/keys/{id}/rotate", params(("project" = String, Path, description = "Project name or id"), ("id" = Uuid, Path, description = "Key id")), responses((status = 201, body = KeyCreated), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn rotate_key(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((project, id)): ApiPath<(String, Uuid)>,
) -> Result<(StatusCode, Noted<Json<KeyCreated>>), ApiError> {
    let project = managed(&state, &caller, &project).await?;
    let old = live_key(&state, project.id, id).await?;
    let body = NewKey {
        name: old.name.clone(),
        role: old.role,
        routes: old.routes.clone(),
        expires_at: old.expires_at,
        budget_usd: None,
        budget_period: None,
        rpm: None,
        tpm: None,
    };
    let (mut row, secret) = new_key(project.id, &body, Some(old.id));
    // The new key keeps the old one's budget (its spending starts afresh under the new id)
    // and its rates.
    row.budget_usd = old.budget_usd;
    row.budget_period_secs = old.budget_period_secs;
    (row.rpm, row.tpm) = (old.rpm, old.tpm);
    let row = state
        .store
        .rotate_key(project.id, old.id, &row)
        .await
        .map_err(|e| match e {
            stead_persistence::Error::NotFound(message) => {
                ApiError::new(ErrorCode::KeyNotFound, message)
            }
            other => other.into(),
        })?;
    state.keys.forget(&old);
    tracing::info!(project = %project.id, key = %row.id, replaced = %old.id,
        by = %caller.name(), "key rotated");
    let note = AuditNote::new(
        Some(project.id),
        [
            ("key_id", row.id.to_string().into()),
            ("replaced", old.id.to_string().into()),
        ],
    );
    let created = KeyCreated {
        view: (&row).into(),
        key: secret,
    };
    Ok((StatusCode::CREATED, (note, Json(created))))
}

#[utoipa::path(delete, path = "/v1/projects/{project}/keys/{id}", params(("project" = String, Path, description = "Project name or id"), ("id" = Uuid, Path, description = "Key id")), responses((status = 200, body = KeyRevoked), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_key(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((project, id)): ApiPath<(String, Uuid)>,
) -> Result<Noted<Json<KeyRevoked>>, ApiError> {
    let project = managed(&state, &caller, &project).await?;
    let old = live_key(&state, project.id, id).await?;
    if !state.store.revoke_key(project.id, id).await? {
        return Err(ApiError::new(
            ErrorCode::KeyNotFound,
            format!("no live key {id}"),
        ));
    }
    state.keys.forget(&old);
    tracing::info!(project = %project.id, key = %id, by = %caller.name(), "key revoked");
    let note = AuditNote::new(Some(project.id), [("key_id", id.to_string().into())]);
    Ok((note, Json(KeyRevoked { id, revoked: true })))
}

/// Sets a key's own budget.
#[utoipa::path(patch, path = "/v1/projects/{project}/keys/{id}", params(("project" = String, Path, description = "Project name or id"), ("id" = Uuid, Path, description = "Key id")), request_body = SetBudget, responses((status = 200, body = KeyView), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_key_budget(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((project, id)): ApiPath<(String, Uuid)>,
    ApiJson(body): ApiJson<SetBudget>,
) -> Result<Noted<Json<KeyView>>, ApiError> {
    let project = managed(&state, &caller, &project).await?;
    let (usd, period) = budget(body.budget_usd, body.budget_period.as_deref())?;
    let old = live_key(&state, project.id, id).await?;
    if !state
        .store
        .set_key_budget(project.id, id, usd, period)
        .await?
    {
        return Err(ApiError::new(
            ErrorCode::KeyNotFound,
            format!("no live key {id}"),
        ));
    }
    state.keys.forget(&old);
    tracing::info!(project = %project.id, key = %id, budget_usd = ?usd, period_secs = ?period,
        by = %caller.name(), "key budget set");
    let row = live_key(&state, project.id, id).await?;
    let note = AuditNote::new(
        Some(project.id),
        [
            ("key_id", id.to_string().into()),
            ("budget_usd", usd.into()),
            ("budget_period_secs", period.into()),
        ],
    );
    Ok((note, Json((&row).into())))
}

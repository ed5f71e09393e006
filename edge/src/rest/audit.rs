//! `GET /v1/audit` (docs/audit.md): the audit trail, newest first — the installation's keys
//! see every project's acts (or one project's, `?project=`), a project's admin keys their
//! project's; no one else.

use chrono::{DateTime, Utc};
use serde::Serialize;
use stead_persistence::audit::{AuditEntry, AuditQuery};
use stead_persistence::tenancy::KeyRole;
use stead_persistence::Scope;

use super::*;
use crate::Principal;

/// One act.
#[derive(Serialize, ToSchema)]
pub struct AuditView {
    pub id: Uuid,
    pub at: DateTime<Utc>,
    pub project_id: Uuid,
    /// `api_key:{fingerprint}`, `project_key:{id}`, `session_token:{session}` or `local`.
    pub actor: String,
    /// The operation (`POST /v1/projects/{project}/keys`, `WS approval`).
    pub action: String,
    /// The path it named.
    pub target: String,
    pub status: u16,
    /// The peer's address, when known.
    pub source: Option<String>,
    /// Facts its handler added (ids made, a decision's outcome).
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

impl From<AuditEntry> for AuditView {
    fn from(entry: AuditEntry) -> Self {
        AuditView {
            id: entry.id,
            at: entry.at,
            project_id: entry.project_id,
            actor: entry.actor,
            action: entry.action,
            target: entry.target,
            status: entry.status,
            source: entry.source,
            details: entry.details,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct AuditPage {
    pub entries: Vec<AuditView>,
    /// The next (older) page's `before`; `null` on the last page.
    pub next_cursor: Option<Uuid>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditFilter {
    /// Only this actor's acts.
    actor: Option<String>,
    /// Only actions starting with this (`POST /v1/projects`, `WS `).
    action: Option<String>,
    /// Acts at or after this time (RFC 3339).
    since: Option<DateTime<Utc>>,
    /// Acts before this time (RFC 3339).
    until: Option<DateTime<Utc>>,
    /// `next_cursor` of the previous page.
    before: Option<Uuid>,
    /// Only this project's acts (name or id; the installation's keys).
    project: Option<String>,
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// Whose acts `caller` may read: the installation's keys every project's, a project's admin
/// keys their project's.
fn audit_scope(caller: &Principal) -> Result<Scope, ApiError> {
    match caller {
        Principal::Local | Principal::ApiKey(_) => Ok(Scope::Installation),
        Principal::ProjectKey(key) if key.role == KeyRole::Admin => Ok(Scope::Project(key.project)),
        Principal::User(user) if user.role == KeyRole::Admin => Ok(caller.scope()),
        _ => Err(ApiError::new(
            ErrorCode::Forbidden,
            "the audit trail is for the installation's keys and a project's admin keys",
        )),
    }
}

#[utoipa::path(get, path = "/v1/audit", params(AuditFilter), responses((status = 200, body = AuditPage), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(filter): ApiQuery<AuditFilter>,
) -> Result<Json<AuditPage>, ApiError> {
    let mut scope = audit_scope(&caller)?;
    if let Some(project) = &filter.project {
        if scope != Scope::Installation {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "`project` is for the installation's keys: a project key sees its own project",
            ));
        }
        scope = Scope::Project(projects::managed(&state, &caller, project).await?.id);
    }
    let limit = page_limit(filter.limit, 100, 500)?;
    let entries = state
        .store
        .list_audit(&AuditQuery {
            scope,
            actor: filter.actor,
            action: filter.action,
            since: filter.since,
            until: filter.until,
            before: filter.before,
            limit,
        })
        .await?;
    let next_cursor = (entries.len() == limit as usize)
        .then(|| entries.last().map(|e| e.id))
        .flatten();
    Ok(Json(AuditPage {
        entries: entries.into_iter().map(Into::into).collect(),
        next_cursor,
    }))
}

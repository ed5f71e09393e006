//! `/v1/agents/{agent}/schedules`: schedules that start a new session of an agent at each
//! occurrence. A schedule is its caller's project's (the installation's keys: the default
//! project's), and so are the sessions it starts (docs/tenancy.md). The due-index row is their
//! record; the scheduler starts the occurrences (docs/schedules.md, "Schedules that start
//! sessions").

use stead_actors::agent_schedules::{plan_create, AgentSchedule};
use stead_actors::session::SessionError;
use stead_actors::Refusal;
use stead_persistence::{ScheduleOwner, ScheduleQuery, ScheduleRow};

use super::schedules::{schedule_now, PostSchedule};
use super::*;
use crate::views::{AgentScheduleCancelled, AgentScheduleList, AgentScheduleView};

/// An agent's schedule as clients see it: its definition's fields, key, kind, agent, when it
/// was created and its next occurrence.
fn view(row: &ScheduleRow, record: &AgentSchedule) -> AgentScheduleView {
    AgentScheduleView {
        key: row.key.clone(),
        agent: row.agent.clone(),
        timing: (&record.schedule).into(),
        created_at: record.created_at,
        next_due_at: row.next_due_at,
    }
}

/// The agent, or 422 `unknown_agent` (also for one the caller's project does not allow).
fn known_agent(
    state: &AppState,
    caller: &crate::Principal,
    agent: &str,
) -> Result<std::sync::Arc<stead_actors::session::Agent>, ApiError> {
    match state.sessions.agent(agent) {
        Some(found) if caller.may_use_agent(agent) => Ok(found),
        _ => Err(ApiError::new(
            ErrorCode::UnknownAgent,
            format!("no agent is named `{agent}` (see GET /v1/agents)"),
        )),
    }
}

/// The agent's own schedules in `project` (not its sessions'), by key.
async fn rows(
    state: &AppState,
    project: uuid::Uuid,
    agent: &str,
) -> Result<Vec<(ScheduleRow, AgentSchedule)>, ApiError> {
    let rows = state
        .store
        .list_schedules(&ScheduleQuery {
            scope: stead_persistence::Scope::Project(project),
            agent: Some(agent.to_string()),
            limit: stead_persistence::MAX_PAGE,
            ..Default::default()
        })
        .await?;
    let mut rows: Vec<(ScheduleRow, AgentSchedule)> = rows
        .into_iter()
        .filter_map(|row| Some((AgentSchedule::from_row(&row)?, row)))
        .map(|(record, row)| (row, record))
        .collect();
    rows.sort_by(|a, b| a.0.key.cmp(&b.0.key));
    Ok(rows)
}

#[utoipa::path(post, path = "/v1/agents/{agent}/schedules", params(("agent" = String, Path, description = "Agent name")), request_body = PostSchedule, responses((status = 201, description = "Created", body = AgentScheduleView), (status = 200, description = "The same schedule existed: nothing changed", body = AgentScheduleView), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn create_agent_schedule(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(agent): ApiPath<String>,
    ApiJson(body): ApiJson<PostSchedule>,
) -> Result<Response, ApiError> {
    caller.require_operator()?;
    let found = known_agent(&state, &caller, &agent)?;
    let (key, def, replace) = body.into_parts()?;
    let held = rows(&state, caller.project(), &agent).await?;
    let existing = held.iter().find(|(row, _)| row.key == key);
    let others = held.iter().filter(|(row, _)| row.key != key).count();
    let planned = plan_create(
        caller.project(),
        &agent,
        &key,
        def,
        replace,
        Some(billed(&caller)),
        existing.map(|(_, record)| record),
        others,
        &found.rules,
        schedule_now(),
    );
    let (status, row) = match planned {
        Ok(row) => {
            state
                .store
                .put_schedules(std::slice::from_ref(&row))
                .await?;
            state.sessions.due_changed();
            (StatusCode::CREATED, row)
        }
        Err(Refusal::ScheduleExists) => match existing {
            Some((row, _)) => (StatusCode::OK, row.clone()),
            None => return Err(SessionError::Refused(Refusal::ScheduleExists).into()),
        },
        Err(refusal) => return Err(SessionError::Refused(refusal).into()),
    };
    let record = AgentSchedule::from_row(&row)
        .ok_or_else(|| ApiError::new(ErrorCode::ScheduleNotFound, "the schedule is gone"))?;
    Ok((status, Json(view(&row, &record))).into_response())
}

#[utoipa::path(get, path = "/v1/agents/{agent}/schedules", params(("agent" = String, Path, description = "Agent name")), responses((status = 200, body = AgentScheduleList), (status = 400, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn list_agent_schedules(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(agent): ApiPath<String>,
) -> Result<Json<AgentScheduleList>, ApiError> {
    caller.require_operator()?;
    known_agent(&state, &caller, &agent)?;
    let schedules = rows(&state, caller.project(), &agent)
        .await?
        .iter()
        .map(|(row, record)| view(row, record))
        .collect();
    Ok(Json(AgentScheduleList { schedules }))
}

#[utoipa::path(delete, path = "/v1/agents/{agent}/schedules/{key}", params(("agent" = String, Path, description = "Agent name"), ("key" = String, Path, description = "Schedule key")), responses((status = 200, description = "Deleted: no further occurrence starts", body = AgentScheduleCancelled), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn cancel_agent_schedule(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((agent, key)): ApiPath<(String, String)>,
) -> Result<Json<AgentScheduleCancelled>, ApiError> {
    caller.require_operator()?;
    known_agent(&state, &caller, &agent)?;
    let owner = ScheduleOwner::Agent {
        project: caller.project(),
        name: agent.clone(),
    };
    if !state.store.delete_schedule(&owner, &key).await? {
        return Err(ApiError::new(
            ErrorCode::ScheduleNotFound,
            format!("agent `{agent}` has no schedule `{key}`"),
        ));
    }
    Ok(Json(AgentScheduleCancelled {
        agent,
        key,
        cancelled: true,
    }))
}

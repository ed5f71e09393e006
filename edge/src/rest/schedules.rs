//! `/v1/sessions/{id}/schedules` — create (idempotent by key), list and cancel a session's
//! schedules, which its actor journals — and `/v1/schedules`, the due index across sessions
//! (operators). docs/schedules.md.

use chrono::{DateTime, SubsecRound, Utc};
use stead_actors::{CatchUp, ScheduleDef, ScheduleMessage, ScheduleState};
use stead_persistence::{ScheduleOwner, ScheduleQuery};

use super::*;
use crate::views::{DueSchedule, DueScheduleList, ScheduleList, ScheduleView};

/// `{"key", "message": {"text"}, one of "at" | "delay_secs" | "cron" (+ "tz") | "every_secs",
/// "catch_up"?, "replace"?}`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostSchedule {
    /// Unique within the session: 1 to 128 letters, digits, `-`, `_` or `.`.
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_.-]+$")]
    key: String,
    /// What each firing delivers to the session, as a user message.
    #[schema(value_type = Object)]
    message: ScheduleMessage,
    /// Once, at this RFC 3339 instant (in the future).
    #[serde(default)]
    #[schema(value_type = Option<String>, format = DateTime)]
    at: Option<DateTime<Utc>>,
    /// Once, this many seconds from now.
    #[serde(default)]
    delay_secs: Option<u64>,
    /// A five-field cron expression (minute hour day-of-month month day-of-week).
    #[serde(default)]
    cron: Option<String>,
    /// The IANA time zone of `cron` (default `UTC`).
    #[serde(default)]
    tz: Option<String>,
    /// Every this many seconds from now.
    #[serde(default)]
    every_secs: Option<u64>,
    /// Missed occurrences: `one` (default), `all` or `skip`.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    catch_up: Option<CatchUp>,
    /// Redefine the schedule that holds `key` (otherwise a different definition is 409).
    #[serde(default)]
    replace: bool,
}

/// Largest `message.args` of a callback schedule (bytes of JSON).
const MAX_ARGS_BYTES: usize = 8 << 10;

impl PostSchedule {
    /// The key, the definition and `replace`, after the checks a body gets before its
    /// definition is decided on.
    pub(crate) fn into_parts(self) -> Result<(String, ScheduleDef, bool), ApiError> {
        if let Some(text) = &self.message.text {
            check_message(text, None)?;
        }
        if let Some(args) = &self.message.args {
            if stead_persistence::contains_nul(args) {
                return Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    "`message.args` must not contain a NUL character (\\u0000)",
                ));
            }
        }
        if self
            .message
            .args
            .as_ref()
            .is_some_and(|a| a.to_string().len() > MAX_ARGS_BYTES)
        {
            return Err(ApiError::new(
                ErrorCode::InvalidSchedule,
                format!("`message.args` is over {MAX_ARGS_BYTES} bytes"),
            ));
        }
        if self.cron.as_deref().is_some_and(|c| c.len() > 200)
            || self.tz.as_deref().is_some_and(|t| t.len() > 100)
        {
            return Err(ApiError::new(
                ErrorCode::InvalidSchedule,
                "`cron` is at most 200 bytes and `tz` at most 100",
            ));
        }
        let def = ScheduleDef {
            at: self.at,
            delay_secs: self.delay_secs,
            cron: self.cron,
            tz: self.tz,
            every_secs: self.every_secs,
            message: self.message,
            catch_up: self.catch_up.unwrap_or_default(),
        };
        Ok((self.key, def, self.replace))
    }
}

/// The creation instant of a schedule made now (milliseconds, as the views show it).
pub(crate) fn schedule_now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(3)
}

/// The session's schedules, pending ones first (earliest due first), then done ones.
pub fn schedules_view(folded: &SessionState) -> Vec<ScheduleView> {
    let mut all: Vec<(&String, &ScheduleState)> = folded.schedules.iter().collect();
    all.sort_by_key(|(key, s)| (s.next_due_at.is_none(), s.next_due_at, key.as_str()));
    all.into_iter()
        .map(|(key, s)| ScheduleView::of(key, s))
        .collect()
}

#[utoipa::path(post, path = "/v1/sessions/{id}/schedules", params(("id" = Uuid, Path, description = "Session id")), request_body = PostSchedule, responses((status = 201, description = "Created (journaled `schedule_created`)", body = ScheduleView), (status = 200, description = "The same schedule existed: nothing journaled", body = ScheduleView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn create_schedule(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<PostSchedule>,
) -> Result<Response, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    let (key, def, replace) = body.into_parts()?;
    let input = Input::CreateSchedule {
        key: key.clone(),
        def: Box::new(def),
        replace,
        now: schedule_now(),
    };
    let status = match state.sessions.send(id, input).await {
        Ok(_) => StatusCode::CREATED,
        Err(stead_actors::session::SessionError::Refused(
            stead_actors::Refusal::ScheduleExists,
        )) => StatusCode::OK,
        Err(error) => return Err(error.into()),
    };
    let folded = state.sessions.state(id).await?;
    let view = folded
        .schedules
        .get(&key)
        .map(|s| ScheduleView::of(&key, s))
        .ok_or_else(|| ApiError::new(ErrorCode::ScheduleNotFound, "the schedule is gone"))?;
    Ok((status, Json(view)).into_response())
}

#[utoipa::path(get, path = "/v1/sessions/{id}/schedules", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = ScheduleList), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn list_schedules(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<ScheduleList>, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    let folded = state.sessions.state(id).await?;
    Ok(Json(ScheduleList {
        schedules: schedules_view(&folded),
    }))
}

#[utoipa::path(delete, path = "/v1/sessions/{id}/schedules/{key}", params(("id" = Uuid, Path, description = "Session id"), ("key" = String, Path, description = "Schedule key")), responses((status = 200, description = "Cancelled (journaled `schedule_cancelled`)", body = Committed), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn cancel_schedule(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((id, key)): ApiPath<(Uuid, String)>,
) -> Result<Json<Committed>, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    let reason = if caller.is_operator() {
        "cancelled by an operator"
    } else {
        "cancelled by the session's user"
    };
    let reason = reason.into();
    commit(&state, id, Input::CancelSchedule { key, reason }).await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DueQuery {
    /// Only rows due at or before this RFC 3339 instant.
    #[serde(default)]
    #[param(value_type = Option<String>, format = DateTime)]
    due_before: Option<DateTime<Utc>>,
    #[serde(default)]
    session_id: Option<Uuid>,
    /// 1 to 500 (default 50).
    #[serde(default)]
    limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/schedules", params(DueQuery), responses((status = 200, description = "The due index, earliest first", body = DueScheduleList), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn due_schedules(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<DueQuery>,
) -> Result<Json<DueScheduleList>, ApiError> {
    caller.require_operator()?;
    let limit = page_limit(query.limit, 50, stead_persistence::MAX_PAGE)?;
    let rows = state
        .store
        .list_schedules(&ScheduleQuery {
            scope: caller.scope(),
            due_before: query.due_before,
            session_id: query.session_id,
            agent: None,
            limit,
        })
        .await?;
    let schedules = rows
        .into_iter()
        .map(|row| {
            let kind = match stead_actors::session::approval_call(&row.key) {
                Some(_) => "approval_expiry".to_string(),
                None => row.definition["kind"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| {
                        kind_of(row.definition.get("schedule").unwrap_or(&row.definition))
                    }),
            };
            DueSchedule {
                session_id: match &row.owner {
                    ScheduleOwner::Session(id) => Some(*id),
                    ScheduleOwner::Agent { .. } => None,
                },
                agent: row.agent,
                key: row.key,
                kind,
                next_due_at: row.next_due_at,
                definition: row.definition,
            }
        })
        .collect();
    Ok(Json(DueScheduleList { schedules }))
}

/// The kind of a stored definition.
pub(crate) fn kind_of(definition: &Value) -> String {
    serde_json::from_value::<ScheduleDef>(definition.clone())
        .map(|d| d.kind().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

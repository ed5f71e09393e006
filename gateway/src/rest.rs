//! REST handlers (SPEC §5): sessions, messages, events, approvals, cancel, state at a seq,
//! forks, agents. Inputs go to the session's actor, which journals them before anything
//! happens; reads come from the journal or the actor's folded state.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use stead_actors::{ApprovalScope, CallStatus, Input, Overrides, SessionEvent, SessionState};
use stead_persistence::{Event, NewEvent, NewSession, Session, SessionQuery, SessionStatus};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::Caller;
use crate::openapi::{
    AgentList, Committed, Decided, ErrorBody, EventsPage, Forked, Inbox, MessageAccepted,
    MessageWaited, ModelList, SessionCreated, SessionList, SessionView, StateView,
};
use crate::{ApiError, ApiJson, ApiPath, ApiQuery, AppState};

/// Largest user message (bytes).
pub const MAX_MESSAGE_BYTES: usize = 32 << 10;
/// Most events one `events` page returns.
const MAX_EVENTS_PAGE: u32 = 1000;
/// Largest metadata object of a session (bytes of JSON).
const MAX_METADATA_BYTES: usize = 16 << 10;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// One of the configured agents (the served schema lists them).
    #[schema(min_length = 1)]
    agent: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

#[utoipa::path(post, path = "/v1/sessions", request_body = CreateSession, responses((status = 201, body = SessionCreated), (status = 400, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn create_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(body): ApiJson<CreateSession>,
) -> Result<Response, ApiError> {
    caller.require_operator()?;
    if state.sessions.agent(&body.agent).is_none() {
        return Err(ApiError::unprocessable(
            "unknown_agent",
            format!("no agent is named `{}` (see GET /v1/agents)", body.agent),
        ));
    }
    let metadata = body.metadata.unwrap_or_else(|| json!({}));
    if !metadata.is_object() {
        return Err(ApiError::unprocessable(
            "invalid_request",
            "`metadata` must be a JSON object",
        ));
    }
    if metadata.to_string().len() > MAX_METADATA_BYTES {
        return Err(ApiError::unprocessable(
            "invalid_request",
            format!("`metadata` is over {MAX_METADATA_BYTES} bytes"),
        ));
    }
    let row = state
        .store
        .create_session(NewSession {
            id: None,
            agent: body.agent.clone(),
            metadata,
        })
        .await?;
    let (kind, payload) = SessionEvent::SessionCreated {
        agent: body.agent.clone(),
    }
    .to_parts();
    state
        .store
        .append(row.id, 0, vec![NewEvent::new(kind, payload)])
        .await?;
    let mut view = row_view(&row);
    view["last_seq"] = json!(1);
    view["token"] = json!(state.auth.session_token(row.id));
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    agent: Option<String>,
    #[param(inline)]
    status: Option<StatusParam>,
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// A session status, as a filter.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "snake_case")]
pub enum StatusParam {
    Idle,
    Running,
    AwaitingApproval,
    Failed,
    Closed,
}

impl From<StatusParam> for SessionStatus {
    fn from(status: StatusParam) -> Self {
        match status {
            StatusParam::Idle => SessionStatus::Idle,
            StatusParam::Running => SessionStatus::Running,
            StatusParam::AwaitingApproval => SessionStatus::AwaitingApproval,
            StatusParam::Failed => SessionStatus::Failed,
            StatusParam::Closed => SessionStatus::Closed,
        }
    }
}

/// `limit` within `1..=max`, or a 400.
fn page_limit(limit: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    match limit.unwrap_or(default) {
        n if (1..=max).contains(&n) => Ok(n),
        _ => Err(ApiError::bad_request(
            "invalid_query",
            format!("`limit` is 1 to {max}"),
        )),
    }
}

#[utoipa::path(get, path = "/v1/sessions", params(ListQuery), responses((status = 200, body = SessionList), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn list_sessions(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require_operator()?;
    let status = query.status.map(SessionStatus::from);
    let limit = page_limit(
        query.limit,
        stead_persistence::DEFAULT_PAGE,
        stead_persistence::MAX_PAGE,
    )?;
    let page = state
        .store
        .list_sessions(&SessionQuery {
            agent: query.agent,
            status,
            limit,
            cursor: query.cursor.filter(|c| !c.is_empty()),
        })
        .await
        .map_err(|e| match e {
            stead_persistence::Error::InvalidInput(m) => ApiError::bad_request("invalid_query", m),
            other => other.into(),
        })?;
    Ok(Json(json!({
        "sessions": page.sessions.iter().map(row_view).collect::<Vec<_>>(),
        "next_cursor": page.next_cursor,
    })))
}

#[utoipa::path(get, path = "/v1/sessions/{id}", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = SessionView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn get_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Value>, ApiError> {
    caller.require_session(id)?;
    let row = state.store.get_session(id).await?;
    let folded = state.sessions.state(id).await?;
    Ok(Json(session_view(&row, &folded)))
}

#[utoipa::path(delete, path = "/v1/sessions/{id}", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = SessionView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn close_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Value>, ApiError> {
    caller.require_session(id)?;
    let result = state
        .sessions
        .send(
            id,
            Input::Close {
                reason: format!("closed by {}", caller.name()),
            },
        )
        .await;
    match result {
        // Closing a closed session is a no-op (DELETE is idempotent).
        Ok(_) | Err(stead_actors::session::SessionError::Refused(stead_actors::Refusal::Ended))
            if state.sessions.state(id).await?.closed =>
        {
            let row = state.store.get_session(id).await?;
            let folded = state.sessions.state(id).await?;
            Ok(Json(session_view(&row, &folded)))
        }
        Ok(_) => Err(ApiError::internal("close", "the session did not close")),
        Err(error) => Err(error.into()),
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostMessage {
    /// Up to 32 KiB of UTF-8 (the schema says 8,192 characters, which always fits).
    #[schema(min_length = 1, max_length = 8192, pattern = "\\S")]
    text: String,
    /// Applied once: a repeated `client_id` is refused with `duplicate_client_id`.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200)]
    client_id: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    #[serde(default)]
    wait: bool,
}

/// Checks a user message's text and client id (shared with the WebSocket).
pub fn check_message(text: &str, client_id: Option<&str>) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::unprocessable(
            "invalid_request",
            "`text` must not be empty",
        ));
    }
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "message_too_large",
            format!("`text` is over {MAX_MESSAGE_BYTES} bytes"),
        ));
    }
    if client_id.is_some_and(|c| c.is_empty() || c.len() > 200) {
        return Err(ApiError::unprocessable(
            "invalid_request",
            "`client_id` must be 1 to 200 bytes",
        ));
    }
    Ok(())
}

#[utoipa::path(post, path = "/v1/sessions/{id}/messages", params(("id" = Uuid, Path, description = "Session id"), WaitQuery), request_body = PostMessage, responses((status = 202, description = "Accepted (or the wait ran out)", body = MessageAccepted), (status = 200, description = "With wait=true: the turn ended or parked", body = MessageWaited), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn post_message(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<WaitQuery>,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<Response, ApiError> {
    caller.require_session(id)?;
    check_message(&body.text, body.client_id.as_deref())?;
    // Attach before sending, so the wait sees every frame the message causes.
    let mut subscription = if query.wait {
        Some(state.sessions.attach(id, 65_536).await?)
    } else {
        None
    };
    let seq = state
        .sessions
        .send(
            id,
            Input::UserMessage {
                text: body.text,
                client_id: body.client_id,
            },
        )
        .await?;
    let Some(subscription) = &mut subscription else {
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({ "session_id": id, "seq": seq })),
        )
            .into_response());
    };
    // Wait for the turn (and any queued before it) to end, or to park on an approval.
    let deadline = tokio::time::Instant::now() + state.limits.wait;
    let mut settled = false;
    let mut look = true;
    loop {
        if look {
            let folded = state.sessions.state(id).await?;
            if folded.last_seq >= seq && folded.status() != "running" {
                settled = true;
                break;
            }
        }
        match tokio::time::timeout_at(deadline, subscription.frames.recv()).await {
            // Only a committed event can end or park the turn; stream deltas cannot.
            Ok(Some(frame)) => look = matches!(frame, stead_actors::session::Frame::Event { .. }),
            Ok(None) => {
                // The actor stopped (a restart): attach again and look at the state.
                tokio::time::sleep(Duration::from_millis(50)).await;
                *subscription = state.sessions.attach(id, 65_536).await?;
                look = true;
            }
            Err(_) => break,
        }
    }
    let folded = state.sessions.state(id).await?;
    let reply = last_reply(&state, id, seq).await?;
    let status = if settled {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((
        status,
        Json(json!({
            "session_id": id,
            "seq": seq,
            "status": folded.status(),
            "last_seq": folded.last_seq,
            "reply": reply,
            "pending_approvals": pending_view(&folded),
        })),
    )
        .into_response())
}

/// The last assistant message journaled after `seq`.
async fn last_reply(state: &AppState, id: Uuid, seq: i64) -> Result<Option<String>, ApiError> {
    let mut reply = None;
    let mut after = seq;
    loop {
        let page = state.store.read(id, after, MAX_EVENTS_PAGE).await?;
        for event in &page {
            if event.kind == "assistant_message" {
                reply = event.payload["text"].as_str().map(str::to_string);
            }
        }
        match page.last() {
            Some(last) if page.len() == MAX_EVENTS_PAGE as usize => after = last.seq,
            _ => return Ok(reply),
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Events with a greater seq (default 0: from the start).
    #[param(minimum = 0)]
    after: Option<i64>,
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/sessions/{id}/events", params(("id" = Uuid, Path, description = "Session id"), EventsQuery), responses((status = 200, body = EventsPage), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require_session(id)?;
    let after = query.after.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::bad_request(
            "invalid_query",
            "`after` must not be negative",
        ));
    }
    let limit = page_limit(query.limit, 100, MAX_EVENTS_PAGE)?;
    let row = state.store.get_session(id).await?;
    let events = state.store.read(id, after, limit).await?;
    let mut page = json!({
        "events": events.iter().map(event_view).collect::<Vec<_>>(),
        "last_seq": row.last_seq,
    });
    if let Some(compaction) = state.store.compaction(id).await? {
        page["compacted_through"] = json!(compaction.through_seq);
    }
    Ok(Json(page))
}

/// What an approval covers.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Once,
    Session,
}

impl From<Scope> for ApprovalScope {
    fn from(scope: Scope) -> Self {
        match scope {
            Scope::Once => ApprovalScope::Once,
            Scope::Session => ApprovalScope::Session,
        }
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Decide {
    approved: bool,
    #[serde(default)]
    reason: Option<String>,
    /// `once` (default) or `session` (approve this tool for the rest of the session).
    #[serde(default)]
    scope: Option<Scope>,
    #[serde(default)]
    args_hash: Option<String>,
}

/// The decision input (shared with the WebSocket).
pub fn decision_input(
    call_id: String,
    approved: bool,
    reason: Option<String>,
    scope: Option<ApprovalScope>,
    args_hash: Option<String>,
    caller: &crate::Principal,
) -> Input {
    Input::Decision {
        call_id,
        approved,
        reason,
        decided_by: caller.name(),
        scope: scope.unwrap_or(ApprovalScope::Once),
        args_hash,
    }
}

#[utoipa::path(post, path = "/v1/sessions/{id}/approvals/{call_id}", params(("id" = Uuid, Path, description = "Session id"), ("call_id" = String, Path, description = "The tool call awaiting approval")), request_body = Decide, responses((status = 200, body = Decided), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn decide_approval(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((id, call_id)): ApiPath<(Uuid, String)>,
    ApiJson(body): ApiJson<Decide>,
) -> Result<Json<Value>, ApiError> {
    caller.require_session(id)?;
    let input = decision_input(
        call_id.clone(),
        body.approved,
        body.reason,
        body.scope.map(Into::into),
        body.args_hash,
        &caller,
    );
    let seq = state.sessions.send(id, input).await?;
    Ok(Json(json!({
        "session_id": id,
        "call_id": call_id,
        "approved": body.approved,
        "seq": seq,
    })))
}

#[utoipa::path(post, path = "/v1/sessions/{id}/cancel", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = Committed), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Value>, ApiError> {
    caller.require_session(id)?;
    let seq = state
        .sessions
        .send(
            id,
            Input::Cancel {
                reason: format!("cancelled by {}", caller.name()),
            },
        )
        .await?;
    Ok(Json(json!({ "session_id": id, "seq": seq })))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AtQuery {
    /// Fold the journal up to this seq (default: the current state).
    #[param(minimum = 1)]
    at: Option<i64>,
}

#[utoipa::path(get, path = "/v1/sessions/{id}/state", params(("id" = Uuid, Path, description = "Session id"), AtQuery), responses((status = 200, body = StateView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 410, description = "The journal was compacted through the seq asked for", body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn state_at(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<AtQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require_session(id)?;
    let row = state.store.get_session(id).await?;
    let folded = match query.at {
        None => state.sessions.state(id).await?,
        Some(at) => {
            check_seq(at, row.last_seq)?;
            stead_actors::replay::fold_until(&state.store, id, at).await?
        }
    };
    Ok(Json(stead_actors::replay::state_view(id, &folded)))
}

fn check_seq(at: i64, last_seq: i64) -> Result<(), ApiError> {
    if at < 1 || at > last_seq {
        return Err(ApiError::unprocessable(
            "seq_out_of_range",
            format!("`at` must be between 1 and the session's last seq ({last_seq})"),
        ));
    }
    Ok(())
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkOverrides {
    #[serde(default)]
    route: Option<String>,
    /// Another name for `route` (what `/v1/chat/completions` calls a route).
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    system_prompt: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Fork {
    /// Copy the journal up to this seq.
    #[serde(deserialize_with = "integer")]
    #[schema(minimum = 1)]
    at: i64,
    #[serde(default, deserialize_with = "object")]
    overrides: ForkOverrides,
}

/// A struct only from a JSON object (serde would also read one from an array).
fn object<'de, D: serde::Deserializer<'de>, T: serde::de::DeserializeOwned>(
    deserializer: D,
) -> Result<T, D::Error> {
    match Value::deserialize(deserializer)? {
        value @ Value::Object(_) => serde_json::from_value(value).map_err(serde::de::Error::custom),
        _ => Err(serde::de::Error::custom("expected a JSON object")),
    }
}

/// An integer, also when written as an integral float (`5.0`): JSON has one number type.
fn integer<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let number = serde_json::Number::deserialize(deserializer)?;
    if let Some(i) = number.as_i64() {
        return Ok(i);
    }
    match number.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
        _ => Err(serde::de::Error::custom(format!(
            "{number} is not an integer"
        ))),
    }
}

#[utoipa::path(post, path = "/v1/sessions/{id}/fork", params(("id" = Uuid, Path, description = "Session id")), request_body = Fork, responses((status = 201, body = Forked), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 410, description = "The journal was compacted through the seq asked for", body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn fork(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<Fork>,
) -> Result<Response, ApiError> {
    caller.require_session(id)?;
    caller.require_operator()?; // a fork is a new session: a session token cannot mint one
    let source = state.store.get_session(id).await?;
    check_seq(body.at, source.last_seq)?;
    let route = match (body.overrides.route, body.overrides.model) {
        (Some(r), Some(m)) if r != m => {
            return Err(ApiError::unprocessable(
                "invalid_request",
                "`overrides.route` and `overrides.model` name different routes",
            ))
        }
        (r, m) => r.or(m),
    };
    if let Some(route) = &route {
        if !state.routes.contains(route) {
            return Err(ApiError::unprocessable(
                "unknown_route",
                format!("no route is named `{route}`"),
            ));
        }
    }
    let overrides = Overrides {
        route,
        system_prompt: body.overrides.system_prompt,
    };
    let (row, last_seq) =
        stead_actors::replay::fork(&state.store, &source, body.at, overrides).await?;
    // Activate it: whatever was in flight at `at` carries on in the fork (finished model and
    // tool calls are in the copied journal and are not run again).
    let folded = state.sessions.state(row.id).await?;
    let row = state.store.get_session(row.id).await?;
    let mut view = session_view(&row, &folded);
    view["token"] = json!(state.auth.session_token(row.id));
    view["last_seq"] = json!(last_seq);
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsQuery {
    #[param(inline)]
    status: Option<InboxStatus>,
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// The approval inbox lists pending approvals.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "snake_case")]
pub enum InboxStatus {
    Pending,
}

/// Pending approvals across sessions (the approval inbox), newest session first.
#[utoipa::path(get, path = "/v1/approvals", params(ApprovalsQuery), responses((status = 200, body = Inbox), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn pending_approvals(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<ApprovalsQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require_operator()?;
    let (None | Some(InboxStatus::Pending)) = query.status;
    let limit = page_limit(query.limit, 100, 500)?;
    let mut approvals = Vec::new();
    let mut cursor = None;
    'pages: loop {
        let page = state
            .store
            .list_sessions(&SessionQuery {
                agent: None,
                status: Some(SessionStatus::AwaitingApproval),
                limit: 100,
                cursor,
            })
            .await?;
        for row in &page.sessions {
            let folded = match state.sessions.state(row.id).await {
                Ok(folded) => folded,
                Err(error) => {
                    tracing::warn!(session = %row.id, %error, "cannot read a parked session");
                    continue;
                }
            };
            for mut approval in pending_view(&folded) {
                approval["session_id"] = json!(row.id);
                approval["agent"] = json!(row.agent);
                approvals.push(approval);
                if approvals.len() >= limit as usize {
                    break 'pages;
                }
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(Json(json!({ "approvals": approvals })))
}

#[utoipa::path(get, path = "/v1/agents", responses((status = 200, body = AgentList), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn agents(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require_operator()?;
    let agents: Vec<Value> = state
        .sessions
        .agents()
        .iter()
        .map(|agent| {
            json!({
                "name": agent.name,
                "route": agent.rules.route,
                "system_prompt": agent.system_prompt,
                "max_steps": agent.rules.max_steps,
                "approval_timeout_secs": agent.rules.approval_timeout.map(|t| t.as_secs()),
                "tools": agent.tools.values().map(|tool| json!({
                    "name": tool.name(),
                    "description": tool.description(),
                    "parameters": tool.parameters(),
                    "approval": tool.approval().describe(),
                    "idempotent": tool.idempotent(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(Json(json!({ "agents": agents })))
}

/// The OpenAI-compatible model list: each configured route is a model a client may ask for.
#[utoipa::path(get, path = "/v1/models", responses((status = 200, body = ModelList), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn models(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require_operator()?;
    let data: Vec<Value> = state
        .routes
        .iter()
        .map(|route| json!({ "id": route, "object": "model", "created": 0, "owned_by": "stead" }))
        .collect();
    Ok(Json(json!({ "object": "list", "data": data })))
}

/// A session row as listed.
pub fn row_view(row: &Session) -> Value {
    json!({
        "id": row.id,
        "agent": row.agent,
        "status": row.status.as_str(),
        "metadata": row.metadata,
        "last_seq": row.last_seq,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "closed_at": row.closed_at,
    })
}

/// A session in full: the row plus what its folded state knows.
pub fn session_view(row: &Session, folded: &SessionState) -> Value {
    let mut view = row_view(row);
    view["status"] = json!(folded.status());
    view["last_seq"] = json!(folded.last_seq.max(row.last_seq));
    view["pending_approvals"] = json!(pending_view(folded));
    view["usage"] = json!(folded.usage);
    view["queued_messages"] = json!(folded.queued.len());
    view["forked_from"] = match &folded.forked_from {
        Some((session, at)) => json!({ "session_id": session, "at": at }),
        None => Value::Null,
    };
    view["failure"] = json!(folded.failed);
    view
}

/// The approvals a state is waiting for.
pub fn pending_view(folded: &SessionState) -> Vec<Value> {
    folded
        .pending_approvals()
        .into_iter()
        .map(|call| {
            let (args_hash, reason) = match &call.status {
                CallStatus::AwaitingApproval { args_hash, reason } => (args_hash, reason),
                _ => unreachable!("pending approvals await approval"),
            };
            json!({
                "call_id": call.call_id,
                "tool": call.tool,
                "arguments": call.arguments,
                "args_hash": args_hash,
                "reason": reason,
            })
        })
        .collect()
}

/// A journal event as REST and WebSocket clients see it.
pub fn event_view(event: &Event) -> Value {
    json!({
        "seq": event.seq,
        "kind": event.kind,
        "payload": event.payload,
        "at": rfc3339(event.created_at),
    })
}

/// A committed frame as an event view (identical to the journal's).
pub fn frame_event_view(
    seq: i64,
    event: &SessionEvent,
    at: chrono::DateTime<chrono::Utc>,
) -> Value {
    let (kind, payload) = event.to_parts();
    json!({ "seq": seq, "kind": kind, "payload": payload, "at": rfc3339(at) })
}

pub fn rfc3339(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

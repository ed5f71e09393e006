//! `/v1/sessions`: create, list, read and close sessions.

use super::*;

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
    // An agent the caller's project does not allow reads as one that does not exist.
    if state.sessions.agent(&body.agent).is_none() || !caller.may_use_agent(&body.agent) {
        return Err(ApiError::new(
            ErrorCode::UnknownAgent,
            format!("no agent is named `{}` (see GET /v1/agents)", body.agent),
        ));
    }
    let metadata = body.metadata.unwrap_or_else(|| json!({}));
    if !metadata.is_object() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "`metadata` must be a JSON object",
        ));
    }
    if metadata.to_string().len() > MAX_METADATA_BYTES {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("`metadata` is over {MAX_METADATA_BYTES} bytes"),
        ));
    }
    let row = state
        .store
        .create_session(NewSession {
            project_id: caller.project(),
            id: None,
            agent: body.agent.clone(),
            metadata,
            parent: None,
        })
        .await?;
    let (kind, payload) = SessionEvent::SessionCreated {
        agent: body.agent.clone(),
        principal: Some(billed(&caller)),
        parent: None,
    }
    .to_parts();
    state
        .store
        .append(row.id, 0, vec![NewEvent::new(kind, payload)])
        .await?;
    let (token, token_expires_at) = state.auth.session_token(row.id, row.token_generation);
    let created = SessionCreated {
        row: SessionRow {
            last_seq: 1,
            ..row_view(&row)
        },
        token,
        token_expires_at,
    };
    let note = crate::audit::AuditNote::new(
        Some(row.project_id),
        [
            ("session_id", row.id.to_string().into()),
            ("agent", body.agent.into()),
        ],
    );
    Ok((StatusCode::CREATED, note, Json(created)).into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    agent: Option<String>,
    /// Only the child sessions this session started (sub-agents).
    parent: Option<Uuid>,
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

#[utoipa::path(get, path = "/v1/sessions", params(ListQuery), responses((status = 200, body = SessionList), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn list_sessions(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<SessionList>, ApiError> {
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
            scope: caller.scope(),
            agent: query.agent,
            parent: query.parent,
            eval_run: None,
            status,
            limit,
            cursor: query.cursor.filter(|c| !c.is_empty()),
        })
        .await
        .map_err(|e| match e {
            stead_persistence::Error::InvalidInput(m) => ApiError::new(ErrorCode::InvalidQuery, m),
            other => other.into(),
        })?;
    Ok(Json(SessionList {
        sessions: page.sessions.iter().map(row_view).collect(),
        next_cursor: page.next_cursor,
    }))
}

#[utoipa::path(get, path = "/v1/sessions/{id}", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = SessionView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn get_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<SessionView>, ApiError> {
    caller
        .require_session_tree(state.store.as_ref(), id)
        .await?;
    let row = state.store.get_session(id).await?;
    let folded = state.sessions.state(id).await?;
    Ok(Json(session_view(&row, &folded)))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CloseQuery {
    /// Hard delete (operators only): the session, its journal, snapshots, KV entries,
    /// request-log rows and artifacts are removed in one transaction (then the blobs no other
    /// artifact names). Not undoable.
    purge: Option<bool>,
}

/// `DELETE …?purge=true`: stops the session's actor, writes out the request-log rows still
/// queued, then removes everything of the session in one transaction.
async fn purge(
    state: &AppState,
    caller: &crate::Principal,
    id: Uuid,
) -> Result<Json<Closed>, ApiError> {
    caller.require_operator()?;
    caller.require_session(state.store.as_ref(), id).await?;
    state.store.get_session(id).await?;
    // Retired: its actor stops and no open WebSocket or request can activate it again.
    state.sessions.retire(id).await;
    state.model_router.flush_log().await;
    let purged = state.store.purge_session(id).await?;
    crate::artifacts::delete_orphans(state, &purged.orphaned_blobs).await;
    tracing::info!(
        session = %id,
        events = purged.events,
        request_log_rows = purged.request_log_rows,
        artifacts = purged.artifacts,
        by = %caller.name(),
        "session purged"
    );
    Ok(Json(Closed::Purged(PurgedView {
        session_id: id,
        purged: true,
        events: purged.events,
        request_log_rows: purged.request_log_rows,
        artifacts: purged.artifacts,
    })))
}

/// How long a WebSocket ticket is valid.
pub const TICKET_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// A ticket for opening the session's WebSocket (`?ticket=`): valid one minute and for that
/// only, so that what goes into a URL (browsers cannot set headers on WebSockets) is never an
/// operator key nor a token. Any credential that may access the session may ask for one.
#[utoipa::path(post, path = "/v1/sessions/{id}/ticket", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = Ticket), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn ticket(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Ticket>, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    let row = state.store.get_session(id).await?;
    let (ticket, expires_at) = state.auth.ticket(id, row.token_generation, TICKET_TTL);
    Ok(Json(Ticket {
        session_id: id,
        ticket,
        expires_at,
    }))
}

/// Mints a new token for the session and invalidates every older one (rotation; also how a
/// client renews a token before it expires). The session's own token may rotate itself.
#[utoipa::path(post, path = "/v1/sessions/{id}/token", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = TokenIssued), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn rotate_token(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<TokenIssued>, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    let row = state.store.rotate_token(id).await?;
    let (token, token_expires_at) = state.auth.session_token(id, row.token_generation);
    tracing::info!(session = %id, generation = row.token_generation, by = %caller.name(), "session token rotated");
    Ok(Json(TokenIssued {
        session_id: id,
        token,
        token_expires_at,
    }))
}

#[utoipa::path(delete, path = "/v1/sessions/{id}", params(("id" = Uuid, Path, description = "Session id"), CloseQuery), responses((status = 200, body = Closed), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn close_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<CloseQuery>,
) -> Result<crate::audit::Noted<Json<Closed>>, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    if query.purge == Some(true) {
        // The session's project, read before it is gone.
        let project = state.store.get_session(id).await?.project_id;
        let purged = purge(&state, &caller, id).await?;
        let note = crate::audit::AuditNote::new(Some(project), [("purged", true.into())]);
        return Ok((note, purged));
    }
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
            let note =
                crate::audit::AuditNote::new(Some(row.project_id), [("purged", false.into())]);
            Ok((
                note,
                Json(Closed::Session(Box::new(session_view(&row, &folded)))),
            ))
        }
        Ok(_) => Err(ApiError::internal("close", "the session did not close")),
        Err(error) => Err(error.into()),
    }
}

/// `GET /v1/sessions/{id}/children`: the child sessions this session's `agent` tool calls
/// started, newest first (the first 500; `GET /v1/sessions?parent=` pages further).
#[utoipa::path(get, path = "/v1/sessions/{id}/children", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = SessionList), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn children(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<SessionList>, ApiError> {
    caller
        .require_session_tree(state.store.as_ref(), id)
        .await?;
    state.store.get_session(id).await?;
    let page = children_page(&state, id).await?;
    Ok(Json(SessionList {
        sessions: page.sessions.iter().map(row_view).collect(),
        next_cursor: page.next_cursor,
    }))
}

//! Approvals and cancellation: deciding a parked tool call, the pending-approvals inbox, and
//! cancelling a session's turn.

use super::*;

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
                parent: None,
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

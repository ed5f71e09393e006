//! Approvals and cancellation: deciding a parked tool call, the pending-approvals inbox, and
//! cancelling a session's turn.

use super::*;
use stead_model::CallId;

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
    /// On a budget approval (`kind: "budget"`): how far past its budgets the parked model call
    /// may go, in USD (default: the shortfall it parked on). Refused on a tool's approval.
    #[serde(default)]
    #[schema(minimum = 0.0)]
    overspend_usd: Option<f64>,
}

/// What a person decided on one approval (over REST or the WebSocket).
pub struct Verdict {
    pub approved: bool,
    pub reason: Option<String>,
    pub scope: Option<ApprovalScope>,
    pub args_hash: Option<String>,
    pub overspend_usd: Option<f64>,
}

/// Refuses an overspend that is no amount of money (negative, not finite).
pub fn check_overspend(overspend_usd: Option<f64>) -> Result<(), ApiError> {
    match overspend_usd {
        Some(usd) if !usd.is_finite() || usd < 0.0 => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "overspend_usd must be a finite amount of USD, 0 or more",
        )),
        _ => Ok(()),
    }
}

/// The decision input (shared with the WebSocket).
pub fn decision_input(call_id: CallId, verdict: Verdict, caller: &crate::Principal) -> Input {
    Input::Decision {
        call_id,
        approved: verdict.approved,
        reason: verdict.reason,
        decided_by: caller.name(),
        scope: verdict.scope.unwrap_or(ApprovalScope::Once),
        args_hash: verdict.args_hash,
        overspend_usd: verdict.overspend_usd,
        may_spend: caller.may_spend(),
    }
}

#[utoipa::path(post, path = "/v1/sessions/{id}/approvals/{call_id}", params(("id" = Uuid, Path, description = "Session id"), ("call_id" = String, Path, description = "The tool call awaiting approval")), request_body = Decide, responses((status = 200, body = Decided), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn decide_approval(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((id, call_id)): ApiPath<(Uuid, String)>,
    ApiJson(body): ApiJson<Decide>,
) -> Result<crate::audit::Noted<Json<Decided>>, ApiError> {
    let call_id = CallId::from(call_id);
    caller
        .require_session_tree(state.store.as_ref(), id)
        .await?;
    check_overspend(body.overspend_usd)?;
    let verdict = Verdict {
        approved: body.approved,
        reason: body.reason,
        scope: body.scope.map(Into::into),
        args_hash: body.args_hash,
        overspend_usd: body.overspend_usd,
    };
    let note = crate::audit::AuditNote::new(
        None,
        [
            ("approved", verdict.approved.into()),
            ("overspend_usd", verdict.overspend_usd.into()),
            ("reason", verdict.reason.clone().into()),
        ],
    );
    let input = decision_input(call_id.clone(), verdict, &caller);
    let seq = state.sessions.send(id, input).await?;
    Ok((
        note,
        Json(Decided {
            session_id: id,
            call_id,
            approved: body.approved,
            seq,
        }),
    ))
}

#[utoipa::path(post, path = "/v1/sessions/{id}/cancel", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = Committed), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Committed>, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    let reason = format!("cancelled by {}", caller.name());
    commit(&state, id, Input::Cancel { reason }).await
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
) -> Result<Json<Inbox>, ApiError> {
    caller.require_operator()?;
    let (None | Some(InboxStatus::Pending)) = query.status;
    let limit = page_limit(query.limit, 100, 500)?;
    let mut approvals = Vec::new();
    let mut cursor = None;
    'pages: loop {
        let page = state
            .store
            .list_sessions(&SessionQuery {
                scope: caller.scope(),
                agent: None,
                parent: None,
                eval_run: None,
                status: Some(SessionStatus::AwaitingApproval),
                limit: 100,
                cursor,
            })
            .await?;
        for row in &page.sessions {
            for approval in approvals_of(&state, row).await {
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
    Ok(Json(Inbox { approvals }))
}

/// The approvals a parked session waits for, each naming its session, agent and (for a child
/// session) its parent.
async fn approvals_of(state: &AppState, row: &stead_persistence::Session) -> Vec<InboxApproval> {
    // From the database, not the actor: the same on every node, and no lease moves.
    let folded = match stead_actors::replay::fold_latest(state.store.as_ref(), row.id).await {
        Ok(folded) => folded,
        Err(error) => {
            tracing::warn!(session = %row.id, %error, "cannot read a parked session");
            return Vec::new();
        }
    };
    pending_view(&folded)
        .into_iter()
        .map(|approval| InboxApproval {
            approval,
            session_id: row.id,
            agent: row.agent.clone(),
            parent_session_id: row.parent.as_ref().map(|p| p.session_id),
            parent_call_id: row.parent.as_ref().map(|p| p.call_id.clone()),
        })
        .collect()
}

/// How many levels of descendants the tree's approvals cover.
const TREE_DEPTH: usize = 16;

/// `GET /v1/sessions/{id}/approvals`: what the session's tree waits for — the session's own
/// pending approvals and its descendants' (child sessions of `agent` calls, their children…),
/// each naming its session and parent, the session's own first. A session token reaches its
/// descendants, so the person on the parent's page can decide a child's call.
#[utoipa::path(get, path = "/v1/sessions/{id}/approvals", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = Inbox), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn tree_approvals(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Inbox>, ApiError> {
    caller
        .require_session_tree(state.store.as_ref(), id)
        .await?;
    let root = state.store.get_session(id).await?;
    let mut approvals = Vec::new();
    let mut level = vec![root];
    for _ in 0..=TREE_DEPTH {
        let mut next = Vec::new();
        for row in &level {
            if row.status == SessionStatus::AwaitingApproval {
                approvals.extend(approvals_of(&state, row).await);
            }
            next.extend(children_page(&state, row.id).await?.sessions);
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    Ok(Json(Inbox { approvals }))
}

//! `/v1/sessions/{id}/memory`: the session's pinned memory block (docs/sessions.md, "Memory
//! block") — read by whoever may read the session, replaced by an operator. An operator's edit
//! is journaled as `memory_updated` like the agent's own, so replay and forks see it.

use super::*;

/// The block and its size limit.
#[derive(serde::Serialize, ToSchema)]
pub struct MemoryView {
    pub session_id: Uuid,
    pub text: String,
    /// The most characters the block may hold (the agent's `memory_block` tool's `max_chars`).
    pub max_chars: usize,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetMemory {
    /// The whole new block (lines of text; empty clears it).
    text: String,
}

/// The size limit of a session's block: its agent's largest `memory_block` tool limit, else
/// the default.
fn limit(state: &AppState, agent: &str) -> usize {
    state
        .sessions
        .agent(agent)
        .and_then(|agent| {
            agent
                .rules
                .tools
                .values()
                .filter_map(|r| match r.builtin {
                    Some(stead_actors::schedule_tool::Builtin::Memory { max_chars, .. }) => {
                        Some(max_chars)
                    }
                    _ => None,
                })
                .max()
        })
        .unwrap_or(stead_actors::memory_block::DEFAULT_MAX_CHARS)
}

#[utoipa::path(get, path = "/v1/sessions/{id}/memory", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = MemoryView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn get_memory(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<MemoryView>, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    let row = state.store.get_session(id).await?;
    let folded = state.sessions.state(id).await?;
    Ok(Json(MemoryView {
        session_id: id,
        text: folded.memory,
        max_chars: limit(&state, &row.agent),
    }))
}

#[utoipa::path(put, path = "/v1/sessions/{id}/memory", params(("id" = Uuid, Path, description = "Session id")), request_body = SetMemory, responses((status = 200, body = Committed), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn set_memory(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<SetMemory>,
) -> Result<Json<Committed>, ApiError> {
    caller.require_operator()?;
    caller.require_session(state.store.as_ref(), id).await?;
    let row = state.store.get_session(id).await?;
    let max = limit(&state, &row.agent);
    let chars = body.text.chars().count();
    if chars > max {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the memory block may hold {max} characters; this text has {chars}"),
        ));
    }
    if body.text.contains('\0') {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "the memory block cannot hold a NUL character",
        ));
    }
    let by = format!("operator:{}", caller.name());
    let text = body.text;
    commit(&state, id, Input::SetMemory { text, by }).await
}

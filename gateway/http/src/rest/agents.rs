//! `/v1/agents` and `/v1/models`: what is configured.

use super::*;

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

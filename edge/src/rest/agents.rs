//! `/v1/agents`, `/v1/mcp/servers` and `/v1/models`: what is configured.

use super::*;

#[utoipa::path(get, path = "/v1/agents", responses((status = 200, body = AgentList), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn agents(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<AgentList>, ApiError> {
    caller.require_operator()?;
    let agents = state
        .sessions
        .agents()
        .iter()
        .filter(|agent| caller.may_use_agent(&agent.name))
        .map(|agent| AgentView {
            name: agent.name.clone(),
            route: agent.rules.route.clone(),
            system_prompt: agent.system_prompt.clone(),
            max_steps: agent.rules.max_steps,
            approval_timeout_secs: agent.rules.approval_timeout.map(|t| t.as_secs()),
            tools: agent
                .tools
                .values()
                .map(|tool| ToolView {
                    name: tool.name().to_string(),
                    description: tool.description().to_string(),
                    parameters: tool.parameters(),
                    approval: tool.approval().describe(),
                    idempotent: tool.idempotent(),
                })
                .chain(dynamic_tools(agent))
                .collect(),
            mcp_servers: agent
                .dynamic
                .as_ref()
                .map(|d| d.sources())
                .unwrap_or_default(),
        })
        .collect();
    Ok(Json(AgentList { agents }))
}

/// The agent's MCP tools as its servers offer them now, with their policies.
fn dynamic_tools(agent: &stead_actors::session::Agent) -> Vec<ToolView> {
    let Some(dynamic) = &agent.dynamic else {
        return Vec::new();
    };
    let (_, seen) = dynamic.seen();
    seen.into_iter()
        .filter_map(|tool| {
            let rule = agent.rules.dynamic_rule(&tool.name)?;
            Some(ToolView {
                name: tool.name,
                description: tool.description,
                parameters: tool.parameters,
                approval: rule.approval.describe(),
                idempotent: rule.idempotent,
            })
        })
        .collect()
}

/// The MCP servers Stead is a client of: status, tools, last error and counters.
#[utoipa::path(get, path = "/v1/mcp/servers", responses((status = 200, body = McpServerList), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn mcp_servers(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<McpServerList>, ApiError> {
    caller.require_installation()?;
    Ok(Json(match &state.mcp {
        Some(mcp) => mcp.report(),
        None => McpServerList {
            servers: Vec::new(),
        },
    }))
}

/// The OpenAI-compatible model list: each configured route is a model a client may ask for.
#[utoipa::path(get, path = "/v1/models", responses((status = 200, body = ModelList), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn models(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<ModelList>, ApiError> {
    caller.require_operator()?;
    let data = state
        .routes
        .iter()
        .filter(|route| caller.may_use_route(route))
        .map(|route| ModelEntry {
            id: route.clone(),
            object: "model".into(),
            created: 0,
            owned_by: "stead".into(),
        })
        .collect();
    Ok(Json(ModelList {
        object: "list".into(),
        data,
    }))
}

//! Stead as an MCP server: Streamable HTTP at `/mcp` (rmcp's server), with tools that drive
//! Stead's agents — create a session, send a message and wait for the reply, list pending
//! approvals, decide one. Each tool is the REST call it names, made in-process with the MCP
//! request's own `Authorization`, `Host` and `Origin`: the same authentication (creating
//! sessions and the approvals inbox need operator credentials; a session token reaches only its
//! session), validation, error codes and journaling as REST, and a decision is recorded with
//! who decided (`decided_by`: the API key's fingerprint, the session token's holder, or
//! `local`).

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::Router;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};
use tower::ServiceExt;

/// The router the tools call into, set once the whole router is built.
pub type Inner = Arc<OnceLock<Router>>;

/// The `/mcp` route, calling into `inner` (which [`set`] fills with the finished router),
/// behind [`guard`].
pub fn route(inner: Inner, state: stead_http::AppState) -> Router<stead_http::AppState> {
    let mut config = StreamableHttpServerConfig::default()
        // Host and Origin are checked by Stead's edge guard in front (server.allowed_hosts).
        .disable_allowed_hosts();
    config.max_request_body_bytes = state.limits.body_bytes;
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(SESSION_IDLE);
    let manager = Arc::new(manager);
    let service = StreamableHttpService::new(
        move || {
            Ok(Endpoint {
                inner: inner.clone(),
            })
        },
        manager.clone(),
        config,
    );
    let sessions = Arc::new(Sessions {
        manager,
        owners: Default::default(),
    });
    Router::new()
        .route_service("/mcp", service)
        .route_layer(axum::middleware::from_fn(move |request, next| {
            guard(state.clone(), sessions.clone(), request, next)
        }))
}

/// Live MCP sessions at most, in all (each holds ~130 KiB of rmcp state until it closes or
/// idles out)…
pub const MAX_SESSIONS: usize = 256;
/// …and per credential (an API key, a session token, or `local`).
pub const MAX_SESSIONS_PER_CREDENTIAL: usize = 16;
/// An MCP session with no request for this long is closed (rmcp's default is 5 minutes).
pub const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(120);
/// How long a request body may take to arrive.
pub const BODY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// The live sessions and who created each (`Mcp-Session-Id` → credential).
struct Sessions {
    manager: Arc<LocalSessionManager>,
    owners: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

/// Who a principal is, as a session's owner.
fn owner(principal: &stead_http::Principal) -> String {
    match principal {
        stead_http::Principal::Local => "local".into(),
        stead_http::Principal::ApiKey(fingerprint) => format!("key:{fingerprint}"),
        stead_http::Principal::Session(id) => format!("session:{id}"),
        stead_http::Principal::ProjectKey(key) => format!("project_key:{}", key.id),
        stead_http::Principal::User(user) => format!("user:{}", user.name),
    }
}

/// In front of rmcp (docs/mcp.md, "Stead as an MCP server"): every request is authenticated
/// here, before its body is read (on a keyed server an anonymous `initialize` used to create a
/// session); a request naming an `Mcp-Session-Id` must come from the credential that created
/// it (else 404, as for an unknown session); a new session is refused with 429
/// `too_many_mcp_sessions` over [`MAX_SESSIONS`] or [`MAX_SESSIONS_PER_CREDENTIAL`]; the body
/// is read whole, at most the server's body limit (413) within [`BODY_DEADLINE`] (408).
async fn guard(
    state: stead_http::AppState,
    sessions: Arc<Sessions>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use stead_http::error_code::ErrorCode;
    use stead_http::ApiError;
    let credential = match stead_http::auth::presented(request.headers(), request.uri()) {
        Ok(credential) => credential,
        Err(error) => return error.into_response(),
    };
    let principal = match stead_http::auth::authenticate_presented(
        &state,
        credential.as_deref(),
        request.method(),
        request.uri().path(),
    )
    .await
    {
        Ok(principal) => principal,
        Err(error) => return error.into_response(),
    };
    let who = owner(&principal);
    let named = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let live: std::collections::HashSet<String> = sessions
        .manager
        .sessions
        .read()
        .await
        .keys()
        .map(|id| id.to_string())
        .collect();
    let opens = match &named {
        Some(id) => {
            let owners = sessions.owners.lock().unwrap_or_else(|e| e.into_inner());
            if owners.get(id).is_some_and(|o| *o != who) {
                return ApiError::new(
                    ErrorCode::NotFound,
                    "no such MCP session for this credential",
                )
                .into_response();
            }
            false
        }
        None if request.method() == axum::http::Method::POST => {
            let mut owners = sessions.owners.lock().unwrap_or_else(|e| e.into_inner());
            owners.retain(|id, _| live.contains(id));
            let mine = owners.values().filter(|o| **o == who).count();
            if live.len() >= MAX_SESSIONS || mine >= MAX_SESSIONS_PER_CREDENTIAL {
                return ApiError::new(
                    ErrorCode::TooManyMcpSessions,
                    format!(
                        "too many live MCP sessions ({} in all, {mine} of this credential; the \
                         limits are {MAX_SESSIONS} and {MAX_SESSIONS_PER_CREDENTIAL}): close one \
                         with DELETE /mcp, or wait {} s for an idle one to close",
                        live.len(),
                        SESSION_IDLE.as_secs()
                    ),
                )
                .into_response();
            }
            true
        }
        None => false,
    };
    let limit = state.limits.body_bytes;
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(BODY_DEADLINE, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => {
            return ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("the body is larger than {limit} bytes, or could not be read"),
            )
            .into_response()
        }
        Err(_) => {
            return ApiError::new(
                ErrorCode::InvalidBody,
                format!(
                    "the body did not arrive within {} s",
                    BODY_DEADLINE.as_secs()
                ),
            )
            .into_response()
        }
    };
    let response = next
        .run(axum::extract::Request::from_parts(parts, Body::from(bytes)))
        .await;
    if opens {
        if let Some(id) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            sessions
                .owners
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id.to_string(), who);
        }
    }
    response
}

#[derive(Clone)]
struct Endpoint {
    inner: Inner,
}

fn schema(properties: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "create_session",
            "Create a session of a Stead agent (operator credentials). Returns its id and a token scoped to it.",
            schema(
                json!({
                    "agent": { "type": "string", "description": "The agent's name (GET /v1/agents)" },
                    "metadata": { "type": "object", "description": "Free-form metadata kept with the session" }
                }),
                &["agent"],
            ),
        ),
        Tool::new(
            "send_message",
            "Send a user message to a session and wait until its turn ends or parks on an approval (up to 300 s). Returns the status, the reply and any pending approvals.",
            schema(
                json!({
                    "session_id": { "type": "string" },
                    "text": { "type": "string", "minLength": 1 }
                }),
                &["session_id", "text"],
            ),
        ),
        Tool::new(
            "list_approvals",
            "Pending approvals: of one session (its token suffices), or of every session (operator credentials).",
            schema(json!({ "session_id": { "type": "string" } }), &[]),
        ),
        Tool::new(
            "decide_approval",
            "Approve or reject a pending tool call; the decision is journaled with who decided.",
            schema(
                json!({
                    "session_id": { "type": "string" },
                    "call_id": { "type": "string" },
                    "approved": { "type": "boolean" },
                    "reason": { "type": "string" }
                }),
                &["session_id", "call_id", "approved"],
            ),
        ),
    ]
}

impl ServerHandler for Endpoint {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("stead", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Drive Stead's durable agents: create a session, send messages, decide approvals.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let text = |key: &str| -> Result<String, ErrorData> {
            match arguments.get(key).and_then(Value::as_str) {
                Some(value) if is_path_segment(value) || key == "text" || key == "reason" => {
                    Ok(value.to_string())
                }
                _ => Err(ErrorData::invalid_params(
                    format!("`{key}` must be a string (ids: letters, digits, `-`, `_`)"),
                    None,
                )),
            }
        };
        let (method, path, body) = match request.name.as_ref() {
            "create_session" => {
                let mut body = json!({ "agent": text("agent")? });
                if let Some(metadata) = arguments.get("metadata") {
                    body["metadata"] = metadata.clone();
                }
                ("POST", "/v1/sessions".to_string(), Some(body))
            }
            "send_message" => (
                "POST",
                format!("/v1/sessions/{}/messages?wait=true", text("session_id")?),
                Some(json!({ "text": text("text")? })),
            ),
            "list_approvals" => match arguments.get("session_id") {
                Some(_) => ("GET", format!("/v1/sessions/{}", text("session_id")?), None),
                None => ("GET", "/v1/approvals?status=pending".to_string(), None),
            },
            "decide_approval" => {
                let approved = arguments
                    .get("approved")
                    .and_then(Value::as_bool)
                    .ok_or_else(|| {
                        ErrorData::invalid_params("`approved` must be a boolean", None)
                    })?;
                let mut body = json!({ "approved": approved });
                if arguments.get("reason").is_some() {
                    body["reason"] = json!(text("reason")?);
                }
                (
                    "POST",
                    format!(
                        "/v1/sessions/{}/approvals/{}",
                        text("session_id")?,
                        text("call_id")?
                    ),
                    Some(body),
                )
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool is named `{other}`"),
                    None,
                ))
            }
        };
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let (status, mut answer) = self.call(method, &path, body, parts).await?;
        if request.name == "list_approvals" && arguments.get("session_id").is_some() && status < 300
        {
            answer = json!({ "approvals": answer["pending_approvals"].clone() });
        }
        let result = if status < 300 {
            CallToolResult::structured(answer)
        } else {
            CallToolResult::structured_error(answer)
        };
        Ok(result.into())
    }
}

/// An id that can go into a URL path as is.
fn is_path_segment(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 200
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Endpoint {
    /// One REST call into Stead with the MCP request's credentials and origin headers.
    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        parts: Option<&axum::http::request::Parts>,
    ) -> Result<(u16, Value), ErrorData> {
        let router = self
            .inner
            .get()
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("Stead is starting", None))?;
        let mut request = axum::http::Request::builder().method(method).uri(path);
        if let Some(parts) = parts {
            for name in ["host", "origin"] {
                if let Some(value) = parts.headers.get(name) {
                    request = request.header(name, value);
                }
            }
            // The credential the guard authenticated, whichever way it came (`Authorization`,
            // `x-api-key`, `?token=`), as a Bearer: the REST call acts as the same caller.
            if let Ok(Some(credential)) = stead_http::auth::presented(&parts.headers, &parts.uri) {
                request = request.header("authorization", format!("Bearer {credential}"));
            }
        }
        let request = match body {
            Some(body) => request
                .header("content-type", "application/json")
                .body(Body::from(body.to_string())),
            None => request.body(Body::empty()),
        }
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let response = router
            .oneshot(request)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }
}

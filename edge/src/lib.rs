//! `stead-http` owns Stead's HTTP edge: the axum server with the REST API and the WebSocket
//! chat protocol (docs/api.md), the router's APIs — OpenAI chat completions and embeddings,
//! Anthropic messages, OpenAI responses — and the request-log reads (docs/gateway.md), its error
//! model and extractors, authentication (API keys and per-session tokens), CORS for browser
//! apps (docs/clients.md), the operational endpoints (`/healthz`, `/readyz`, `/metrics`,
//! `/openapi.json`) and the embedded web UI. It holds no state of its own: sessions live in the
//! actors (`stead-actors`), durable data in `stead-persistence`, routing in `stead-router`; it
//! never links the local engine. A server takes its listener and its shutdown signal as
//! arguments, so tests bind `127.0.0.1:0`.

pub mod artifacts;
pub mod audit;
pub mod auth;
mod body_deadline;
pub mod cluster;
pub mod cors;
mod edge;
mod error;
pub mod error_code;
mod gateway;
pub mod knowledge;
pub mod metrics;
pub mod openapi;
mod rest;
mod server;
pub mod speech;
pub mod views;
pub mod webui;
pub mod wire;
mod ws;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use stead_actors::session::SessionRegistry;
use stead_persistence::JournalStore;

pub use auth::{Auth, Principal};
pub use error::{refusal_error, ApiError, ApiJson, ApiPath, ApiQuery};
pub use error_code::ErrorCode;
pub use server::{raise_fd_limit, serve, ServeOptions};
pub use ws::SessionSockets;

/// Bounds on what one client may send or hold.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body (bytes).
    pub body_bytes: usize,
    /// Largest WebSocket text frame the protocol accepts (bytes); a bigger one gets an
    /// `error` frame and the connection stays open.
    pub ws_frame_bytes: usize,
    /// Frames a WebSocket client may fall behind before it is dropped.
    pub ws_queue: usize,
    /// Ping interval; a client silent for three intervals is dropped.
    pub ws_heartbeat: Duration,
    /// How long a new WebSocket connection holds live frames waiting for a `resume`.
    pub ws_resume_hold: Duration,
    /// Longest `?wait=true` on a message.
    pub wait: Duration,
    /// WebSocket connections one session may hold at once.
    pub ws_per_session: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_bytes: 1 << 20,
            ws_frame_bytes: 64 << 10,
            ws_queue: 1024,
            ws_heartbeat: Duration::from_secs(20),
            ws_resume_hold: Duration::from_millis(250),
            wait: Duration::from_secs(300),
            ws_per_session: 16,
        }
    }
}

/// Everything the handlers share: one allocation behind an `Arc`, so that the clone every
/// request and every WebSocket connection takes is one reference count, not one per part
/// (`stead bench gateway`'s profile showed ~3% of the edge's CPU cloning and dropping the
/// parts; a connection held ~0.5 KiB of them).
#[derive(Clone)]
pub struct AppState(Arc<AppStateParts>);

impl AppState {
    pub fn new(parts: AppStateParts) -> Self {
        AppState(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppStateParts;
    fn deref(&self) -> &AppStateParts {
        &self.0
    }
}

/// What [`AppState`] holds.
pub struct AppStateParts {
    pub store: Arc<dyn JournalStore>,
    pub sessions: Arc<SessionRegistry>,
    pub auth: Arc<Auth>,
    /// Projects' virtual keys, cached in front of the store.
    pub keys: Arc<auth::VirtualKeys>,
    /// The identity provider whose tokens the API takes (`[server.oidc]`; `None`: none).
    pub oidc: Option<Arc<auth::oidc::Oidc>>,
    /// Route names agents and forks may use.
    pub routes: Arc<Vec<String>>,
    pub limits: Limits,
    /// Reported by `/healthz`.
    pub version: &'static str,
    /// Turns true when the server shuts down: WebSockets flush and close.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Open WebSocket connections (for a draining shutdown).
    pub connections: Arc<tokio::sync::Semaphore>,
    /// Open WebSocket connections per session (`Limits::ws_per_session`).
    pub session_sockets: Arc<ws::SessionSockets>,
    /// Requests waiting (`?wait=true`) on each session, bounded like its WebSockets.
    pub session_waits: Arc<ws::SessionSockets>,
    /// Request counters and latencies for `/metrics`.
    pub metrics: Arc<metrics::Metrics>,
    /// The model router behind `/v1/chat/completions` (the sessions use the same one).
    pub model_router: Arc<stead_router::Router>,
    /// The MCP servers Stead is a client of (`None`: none configured).
    pub mcp: Option<Arc<dyn McpView>>,
    /// The other nodes on this database (`None`: the node runs alone; docs/cluster.md).
    pub cluster: Option<Arc<dyn cluster::Cluster>>,
    /// Knowledge collections (`None`: not served; docs/knowledge.md).
    pub knowledge: Option<Arc<dyn knowledge::KnowledgeApi>>,
    /// The evaluation engine (docs/evals.md); `None`: the evaluation endpoints answer 404.
    pub evals: Option<Arc<stead_evals::Runner>>,
    /// The artifact store (docs/artifacts.md); `None`: the artifact endpoints answer 404.
    pub artifacts: Option<Arc<artifacts::Artifacts>>,
    /// Speech to text (`POST /v1/audio/transcriptions`); `None`: no speech model.
    pub speech: Option<Arc<dyn speech::SpeechApi>>,
}

/// What the HTTP edge shows of the MCP servers Stead uses (the `stead` crate's registry).
pub trait McpView: Send + Sync {
    /// `GET /v1/mcp/servers`.
    fn report(&self) -> views::McpServerList;
    /// The per-server series of `/metrics`, as Prometheus text.
    fn metrics(&self) -> String;
}

/// Most WebSocket connections one server holds.
pub const MAX_CONNECTIONS: usize = 1 << 20;

/// How long `/readyz` waits for the database before it answers "not ready".
const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// The HTTP router. Unknown paths answer a JSON 404, wrong methods a JSON 405.
pub fn router(state: AppState) -> Router {
    router_with(state, Router::new())
}

/// The HTTP router with `extra` routes (Stead's own `/mcp` endpoint) behind the same edge
/// guard (Host and Origin checks, connection bounds) and request metrics.
pub fn router_with(state: AppState, extra: Router<AppState>) -> Router {
    let limit = state.limits.body_bytes;
    let artifact_limit = state.artifacts.as_ref().map_or(limit, |a| a.max_bytes);
    Router::new()
        .merge(extra)
        .route("/", get(webui::index))
        .route("/assets/{name}", get(webui::asset))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/auth/oidc", get(sign_in))
        .route("/v1/auth/oidc/token", post(sign_in_token))
        .route("/openapi.json", get(openapi::openapi_json))
        .route("/metrics", get(metrics::render))
        .route(
            "/v1/sessions",
            post(rest::create_session).get(rest::list_sessions),
        )
        .route(
            "/v1/sessions/{id}",
            get(rest::get_session).delete(rest::close_session),
        )
        .route("/v1/sessions/{id}/messages", post(rest::post_message))
        .route("/v1/sessions/{id}/token", post(rest::rotate_token))
        .route("/v1/sessions/{id}/ticket", post(rest::ticket))
        .route("/v1/sessions/{id}/events", get(rest::events))
        .route(
            "/v1/sessions/{id}/approvals/{call_id}",
            post(rest::decide_approval),
        )
        .route("/v1/sessions/{id}/cancel", post(rest::cancel))
        .route("/v1/sessions/{id}/state", get(rest::state_at))
        .route(
            "/v1/sessions/{id}/memory",
            get(rest::get_memory).put(rest::set_memory),
        )
        .route(
            "/v1/sessions/{id}/feedback",
            get(rest::session_feedback).post(rest::add_feedback),
        )
        .route("/v1/feedback", get(rest::list_feedback))
        .route("/v1/sessions/{id}/fork", post(rest::fork))
        .route("/v1/sessions/{id}/ws", get(ws::upgrade))
        .route("/v1/sessions/{id}/children", get(rest::children))
        .route("/v1/sessions/{id}/approvals", get(rest::tree_approvals))
        .route(
            "/v1/sessions/{id}/schedules",
            get(rest::list_schedules).post(rest::create_schedule),
        )
        .route(
            "/v1/sessions/{id}/schedules/{key}",
            axum::routing::delete(rest::cancel_schedule),
        )
        .route("/v1/schedules", get(rest::due_schedules))
        .route(
            "/v1/agents/{agent}/schedules",
            get(rest::list_agent_schedules).post(rest::create_agent_schedule),
        )
        .route(
            "/v1/agents/{agent}/schedules/{key}",
            axum::routing::delete(rest::cancel_agent_schedule),
        )
        .route("/v1/approvals", get(rest::pending_approvals))
        .route("/v1/cluster", get(cluster::report))
        .route("/v1/agents", get(rest::agents))
        .route("/v1/mcp/servers", get(rest::mcp_servers))
        .route("/v1/models", get(rest::models))
        .route(
            "/v1/chat/completions",
            post(gateway::openai::chat_completions),
        )
        .route("/v1/embeddings", post(gateway::embeddings::embeddings))
        .route("/v1/messages", post(gateway::anthropic::messages))
        .route("/v1/responses", post(gateway::responses::responses))
        .merge(resource_routes())
        .route("/v1/gateway/logs", get(gateway::logs::logs))
        .route("/v1/gateway/stats", get(gateway::logs::stats))
        .route("/v1/audit", get(rest::audit::list))
        .route(
            "/v1/artifacts",
            post(artifacts::upload).layer(DefaultBodyLimit::max(artifact_limit)),
        )
        .route("/v1/artifacts/{id}", get(artifacts::download))
        .route(
            "/v1/audio/transcriptions",
            post(speech::transcriptions).layer(DefaultBodyLimit::max(artifact_limit)),
        )
        .route(
            "/v1/sessions/{id}/artifacts",
            get(artifacts::session_artifacts),
        )
        .route("/v1/projects/{project}/spend", get(rest::spend::spend))
        // Inside the cluster's forwarding: an act is recorded once, by the node that did it.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            audit::record,
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cluster::forward,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            edge::guard,
        ))
        .with_state(state)
}

/// Knowledge collections, evaluations and projects (inside the edge guard and the audit).
fn resource_routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/collections",
            get(knowledge::list_collections).post(knowledge::create_collection),
        )
        .route(
            "/v1/collections/{name}",
            get(knowledge::get_collection).delete(knowledge::delete_collection),
        )
        .route(
            "/v1/collections/{name}/documents",
            get(knowledge::list_documents),
        )
        .route(
            "/v1/collections/{name}/documents/{id}",
            get(knowledge::get_document)
                .put(knowledge::put_document)
                .delete(knowledge::delete_document),
        )
        .route("/v1/collections/{name}/query", post(knowledge::query))
        .route(
            "/v1/datasets",
            get(rest::evals::list_datasets).post(rest::evals::create_dataset),
        )
        .route("/v1/datasets/{name}", get(rest::evals::get_dataset))
        .route("/v1/datasets/{name}/cases", post(rest::evals::add_case))
        .route(
            "/v1/evals",
            get(rest::evals::list_runs).post(rest::evals::start_run),
        )
        .route("/v1/evals/{id}", get(rest::evals::get_run))
        .route("/v1/evals/{a}/compare/{b}", get(rest::evals::compare_runs))
        .route(
            "/v1/projects",
            get(rest::projects::list_projects).post(rest::projects::create_project),
        )
        .route(
            "/v1/projects/{project}",
            get(rest::projects::get_project).patch(rest::project_settings::set_project),
        )
        .route(
            "/v1/projects/{project}/keys",
            get(rest::projects::list_keys).post(rest::projects::create_key),
        )
        .route(
            "/v1/projects/{project}/keys/{id}",
            axum::routing::delete(rest::projects::revoke_key).patch(rest::projects::set_key_budget),
        )
        .route(
            "/v1/projects/{project}/keys/{id}/rotate",
            post(rest::projects::rotate_key),
        )
}

/// Waits until every WebSocket connection has closed (they close on the shutdown signal after
/// flushing), or `grace` passes.
pub async fn drain_connections(connections: &tokio::sync::Semaphore, grace: Duration) -> bool {
    tokio::time::timeout(grace, connections.acquire_many(MAX_CONNECTIONS as u32))
        .await
        .is_ok()
}

#[utoipa::path(get, path = "/healthz", security(()), responses((status = 200, body = views::Health)))]
async fn healthz(State(state): State<AppState>) -> Json<views::Health> {
    Json(views::Health {
        status: "ok".into(),
        version: state.version.into(),
    })
}

#[utoipa::path(get, path = "/readyz", security(()), responses((status = 200, body = views::Ready), (status = 503, body = views::ErrorBody)))]
async fn readyz(State(state): State<AppState>) -> Result<Json<views::Ready>, ApiError> {
    match tokio::time::timeout(READINESS_TIMEOUT, state.store.ping()).await {
        Ok(Ok(())) => Ok(Json(views::Ready {
            status: "ready".into(),
            database: state.store.backend().to_string(),
        })),
        Ok(Err(error)) => {
            tracing::warn!(error = %error, "readiness check failed");
            Err(ApiError::unavailable("the database does not answer"))
        }
        Err(_) => Err(ApiError::unavailable("the database did not answer in time")),
    }
}

/// The web UI's sign-in settings (public: the page asks before anyone is signed in).
#[utoipa::path(get, path = "/v1/auth/oidc", security(()), responses((status = 200, body = auth::oidc::SignIn), (status = 404, description = "Single sign-on is not configured for the web UI", body = views::ErrorBody)))]
async fn sign_in(State(state): State<AppState>) -> Result<Json<auth::oidc::SignIn>, ApiError> {
    let not_configured = || ApiError::not_found("single sign-on is not configured for the web UI");
    let oidc = state.oidc.as_ref().ok_or_else(not_configured)?;
    oidc.sign_in().await?.map(Json).ok_or_else(not_configured)
}

/// Exchanges a sign-in's code for its access token (public: the person is not signed in yet;
/// the PKCE verifier binds the code to the browser that started the sign-in).
#[utoipa::path(post, path = "/v1/auth/oidc/token", security(()), request_body = auth::oidc::TokenRequest, responses((status = 200, body = auth::oidc::TokenAnswer), (status = 400, body = views::ErrorBody), (status = 404, description = "Single sign-on is not configured for the web UI", body = views::ErrorBody), (status = 413, body = views::ErrorBody), (status = 415, body = views::ErrorBody), (status = 422, body = views::ErrorBody), (status = 503, body = views::ErrorBody)))]
async fn sign_in_token(
    State(state): State<AppState>,
    ApiJson(request): ApiJson<auth::oidc::TokenRequest>,
) -> Result<Json<auth::oidc::TokenAnswer>, ApiError> {
    let oidc = state
        .oidc
        .as_ref()
        .ok_or_else(|| ApiError::not_found("single sign-on is not configured for the web UI"))?;
    oidc.exchange(request).await.map(Json)
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this endpoint does not take that method",
    )
}

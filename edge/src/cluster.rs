//! Several nodes on one database (docs/cluster.md). A session's request that reaches a node not
//! holding the session's lease is served by the node that does: the handler answers
//! `session_elsewhere` with the owner attached ([`Elsewhere`]), and the [`forward`] middleware
//! sends the request — method, path, query, the client's own credentials and body — to the
//! owner's advertised address, signed with the cluster secret, and answers with the owner's
//! response. WebSockets are proxied the same way (`ws::upgrade`). A request another node
//! forwarded is never forwarded again, and one whose node signature does not verify is refused.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::Caller;
use crate::{ApiError, AppState, ErrorCode};

/// The header naming the node that sent a forwarded request (the rest of the node signature's
/// headers are the `stead` crate's, `src/cluster/signature.rs`).
pub const NODE_HEADER: &str = "x-stead-node";

/// The header of a forwarded request that carries the lowercase hex SHA-256 of its body,
/// covered by the node signature: a node-signed request whose body does not hash to it is
/// refused (the signature covered no body, so a captured one could carry another).
pub const BODY_HASH_HEADER: &str = "x-stead-node-body-sha256";

/// The response extension of a `session_elsewhere` answer: the lease holder's node id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elsewhere(pub String);

/// A request as a node forwards it.
#[derive(Debug, Clone)]
pub struct Forwarded {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Pumps frames between the client's socket and the owner's, until either side closes, the
/// client is silent for three heartbeats (the `Duration`: it vanished — the owner, which hears
/// this node answer its pings, cannot tell), or this node shuts down (the client then gets
/// 1001, as from a local socket).
pub type WsPump = Box<
    dyn FnOnce(
            axum::extract::ws::WebSocket,
            tokio::sync::watch::Receiver<bool>,
            std::time::Duration,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send,
>;

/// Whether a request came from another node of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// From a client: it may be forwarded.
    Client,
    /// From another node, its signature verified: served here, never forwarded again.
    Node,
    /// It claims to come from a node and its signature does not verify.
    Forged,
}

/// The cluster as the HTTP edge uses it (the `stead` crate's membership and forwarding).
#[async_trait::async_trait]
pub trait Cluster: Send + Sync {
    /// `GET /v1/cluster`: this node and every registered node with its state.
    async fn report(&self) -> Result<crate::views::ClusterReport, ApiError>;
    /// The owner's answer to `request`; `None` when the owner is not a live node this one can
    /// connect to (nothing was sent: the request may go elsewhere). A request sent whose
    /// answer never came is answered 503 (it may have been applied), never sent again.
    async fn forward(&self, owner: &str, request: Forwarded) -> Option<Response>;
    /// Opens the owner's WebSocket for `uri` (with the client's `headers`) before the client's
    /// upgrade is accepted, and returns what pumps frames between it and the client's socket
    /// until either side closes; `None` when the owner cannot be reached.
    async fn proxy_ws(&self, owner: &str, uri: Uri, headers: HeaderMap) -> Option<WsPump>;
    /// Where the request came from (the node signature headers).
    fn origin(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Origin;
    /// The `stead_cluster_*` series of `/metrics`.
    fn metrics(&self) -> String;
}

/// The middleware: session requests answered `session_elsewhere` go to the owner.
pub async fn forward(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(cluster) = state.cluster.clone() else {
        return next.run(request).await;
    };
    let forged = || {
        ApiError::new(
            ErrorCode::InvalidCredentials,
            "the node signature of this forwarded request does not verify",
        )
        .into_response()
    };
    match cluster.origin(request.method(), request.uri(), request.headers()) {
        Origin::Forged => return forged(),
        Origin::Node => {
            // The signature covers the body's hash: the body must be the one signed.
            let (parts, body) = request.into_parts();
            let Ok(body) = axum::body::to_bytes(body, state.limits.body_bytes).await else {
                return forged();
            };
            let claimed = parts.headers.get(BODY_HASH_HEADER);
            if claimed.and_then(|v| v.to_str().ok()) != Some(&hex_sha256(&body)) {
                return forged();
            }
            return next.run(Request::from_parts(parts, Body::from(body))).await;
        }
        Origin::Client => {}
    }
    let upgrade = request.headers().contains_key(axum::http::header::UPGRADE);
    let Some(id) = session_in_path(request.uri().path()) else {
        return next.run(request).await;
    };
    if upgrade {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, state.limits.body_bytes).await {
        Ok(body) => body,
        Err(_) => {
            return ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("the body is over {} bytes", state.limits.body_bytes),
            )
            .into_response()
        }
    };
    let saved = Forwarded {
        method: parts.method.clone(),
        uri: parts.uri.clone(),
        headers: parts.headers.clone(),
        body: body.clone(),
    };
    // Where the session lives decides where the request runs. An owner that does not answer
    // may be draining (it releases its leases as it stops): the lease is looked at again
    // until it is free or another node answers, for up to `OWNER_WAIT`.
    let deadline = std::time::Instant::now() + OWNER_WAIT;
    let local = state.sessions.node().to_string();
    loop {
        let holder = match state.store.lease_holder(id).await {
            Ok(holder) => holder.filter(|h| *h != local),
            Err(_) => None,
        };
        let Some(owner) = holder else { break };
        if let Some(forwarded) = cluster.forward(&owner, saved.clone()).await {
            return forwarded;
        }
        if std::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(OWNER_RETRY).await;
    }
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    // Taken by another node meanwhile: a read goes there. A write that ran here is never sent
    // again (it may have been applied before the session moved): its 409 stands.
    let Some(Elsewhere(owner)) = response.extensions().get::<Elsewhere>().cloned() else {
        return response;
    };
    if !matches!(saved.method, Method::GET | Method::HEAD) {
        return response;
    }
    cluster.forward(&owner, saved).await.unwrap_or(response)
}

/// The lowercase hex SHA-256 of `body`.
fn hex_sha256(body: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How long a request waits for a session's owner that does not answer (a draining node
/// releases its leases within it).
const OWNER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
const OWNER_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// The session id of a `/v1/sessions/{id}/…` path.
fn session_in_path(path: &str) -> Option<uuid::Uuid> {
    path.strip_prefix("/v1/sessions/")?
        .split('/')
        .next()?
        .parse()
        .ok()
}

/// `GET /v1/cluster` (operators): the nodes sharing this database — each with its advertised
/// address, version, start and heartbeat times, whether it is alive and how many sessions' live
/// leases it holds — and which one answered. A node without `[cluster]` reports itself alone.
#[utoipa::path(get, path = "/v1/cluster", responses((status = 200, body = crate::views::ClusterReport), (status = 401, description = "Missing or invalid credentials", body = crate::views::ErrorBody), (status = 403, description = "Not allowed for this credential", body = crate::views::ErrorBody)))]
pub async fn report(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<axum::Json<crate::views::ClusterReport>, ApiError> {
    caller.require_installation()?;
    match &state.cluster {
        Some(cluster) => Ok(axum::Json(cluster.report().await?)),
        None => Ok(axum::Json(crate::views::ClusterReport {
            clustered: false,
            node_id: state.sessions.node().to_string(),
            nodes: Vec::new(),
        })),
    }
}

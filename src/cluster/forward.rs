//! Forwarding between nodes: a request (or WebSocket) for a session another node holds goes to
//! that node's advertised address, signed with the cluster secret ([`super::signature`]:
//! over both nodes, the time, a nonce, the method, the path with its query and the body's
//! hash) and carries the client's own credentials, which the owner checks as if the client had
//! come to it. A signature that does not verify, is stale or is seen twice is refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ws::{Message as AxumMessage, WebSocket};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use stead_http::cluster::{Cluster, Forwarded, Origin, WsPump};
use stead_http::ApiError;
use stead_persistence::Leases;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use super::signature::Signer;
use super::Membership;

/// Headers that belong to one hop, not to the request.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "host",
    "content-length",
];

/// This node's view of the others, and what it forwards to them.
pub struct Peers {
    membership: Membership,
    store: Arc<dyn Leases>,
    client: reqwest::Client,
    forwarded_http: AtomicU64,
    forwarded_ws: AtomicU64,
    forward_failures: AtomicU64,
    signer: Signer,
    /// The nodes as last read, and when (forwards read them at most once per `NODES_CACHE`).
    nodes: std::sync::Mutex<Option<(std::time::Instant, Vec<stead_persistence::NodeStatus>)>>,
}

/// How long a read of the cluster's nodes serves forwards.
const NODES_CACHE: std::time::Duration = std::time::Duration::from_secs(1);

impl Peers {
    pub fn new(membership: Membership, store: Arc<dyn Leases>) -> anyhow::Result<Peers> {
        // Straight to the owner: no proxy from the environment (it would see the clients'
        // credentials), no redirects, and a short connect timeout (an owner that does not
        // accept is retried while its lease is watched).
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(std::time::Duration::from_secs(1))
            .build()?;
        Ok(Peers {
            signer: Signer::new(membership.secret.clone(), membership.node.node_id.clone()),
            membership,
            store,
            client,
            forwarded_http: AtomicU64::new(0),
            forwarded_ws: AtomicU64::new(0),
            forward_failures: AtomicU64::new(0),
            nodes: std::sync::Mutex::new(None),
        })
    }

    /// The advertised address of `owner` when it is a live node other than this one.
    async fn address(&self, owner: &str) -> Option<String> {
        if owner == self.membership.node.node_id {
            return None;
        }
        let cached = {
            let cache = self
                .nodes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            cache
                .as_ref()
                .filter(|(at, _)| at.elapsed() < NODES_CACHE)
                .map(|(_, nodes)| nodes.clone())
        };
        let nodes = match cached {
            Some(nodes) => nodes,
            None => match self.store.cluster_nodes(self.membership.ttl).await {
                Ok(nodes) => {
                    *self
                        .nodes
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some((std::time::Instant::now(), nodes.clone()));
                    nodes
                }
                Err(error) => {
                    tracing::warn!(%error, "cluster: cannot read the nodes");
                    return None;
                }
            },
        };
        nodes
            .into_iter()
            .find(|n| n.node_id == owner && n.alive)
            .map(|n| n.advertise_url)
    }
}

#[async_trait::async_trait]
impl Cluster for Peers {
    async fn report(&self) -> Result<stead_http::views::ClusterReport, ApiError> {
        let nodes = self
            .store
            .cluster_nodes(self.membership.ttl)
            .await
            .map_err(|e| ApiError::internal("cannot read the cluster's nodes", e))?;
        Ok(stead_http::views::ClusterReport {
            clustered: true,
            node_id: self.membership.node.node_id.clone(),
            nodes: nodes.into_iter().map(Into::into).collect(),
        })
    }

    async fn forward(&self, owner: &str, request: Forwarded) -> Option<Response> {
        let base = self.address(owner).await?;
        let path = request.uri.path_and_query().map_or("/", |p| p.as_str());
        let url = url::Url::parse(&format!("{base}{path}")).ok()?;
        let mut outgoing = self
            .client
            .request(request.method.clone(), url.clone())
            .body(request.body.clone());
        for (name, value) in &request.headers {
            if !HOP_BY_HOP.contains(&name.as_str()) && !name.as_str().starts_with("x-stead-node") {
                outgoing = outgoing.header(name, value);
            }
        }
        for (name, value) in self
            .signer
            .sign(owner, &request.method, &url, &request.body)
        {
            outgoing = outgoing.header(name, value);
        }
        let answer = match outgoing.send().await {
            Ok(answer) => answer,
            // Not connected: nothing reached the owner (it is down or draining).
            // Logged without the URL: its query may hold a session token (`?token=`).
            Err(error) if error.is_connect() => {
                self.forward_failures.fetch_add(1, Ordering::Relaxed);
                let error = error.without_url();
                tracing::debug!(%owner, %error, "cluster: the owner is not reachable");
                return None;
            }
            Err(error) => {
                self.forward_failures.fetch_add(1, Ordering::Relaxed);
                let error = error.without_url();
                tracing::warn!(%owner, %error, "cluster: the owner did not answer a forwarded request");
                return Some(
                    ApiError::new(
                        stead_http::error_code::ErrorCode::NotReady,
                        "the node holding the session stopped answering; the request may have \
                         been applied (read the session's events before sending it again)",
                    )
                    .into_response(),
                );
            }
        };
        self.forwarded_http.fetch_add(1, Ordering::Relaxed);
        let mut response = Response::builder().status(answer.status());
        for (name, value) in answer.headers() {
            if !HOP_BY_HOP.contains(&name.as_str()) {
                response = response.header(name, value);
            }
        }
        // Delivered: whatever happens now, it is not sent again.
        Some(
            response
                .body(Body::from_stream(answer.bytes_stream()))
                .unwrap_or_else(|_| {
                    ApiError::new(
                        stead_http::error_code::ErrorCode::NotReady,
                        "the owner's answer could not be passed on; the request may have been applied",
                    )
                    .into_response()
                }),
        )
    }

    async fn proxy_ws(&self, owner: &str, uri: Uri, headers: HeaderMap) -> Option<WsPump> {
        let base = self.address(owner).await?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let url = url::Url::parse(&format!("{}{path}", base.replacen("http", "ws", 1))).ok()?;
        let mut request = match url.as_str().into_client_request() {
            Ok(request) => request,
            Err(error) => {
                let error = stead_config::redact::redact_urls(&error.to_string());
                tracing::warn!(%owner, %error, "cluster: bad WebSocket address");
                return None;
            }
        };
        // The credential as the client sent it (the owner checks it again).
        for name in [
            axum::http::header::AUTHORIZATION,
            HeaderName::from_static("x-api-key"),
        ] {
            if let Some(value) = headers.get(&name) {
                request.headers_mut().insert(name, value.clone());
            }
        }
        for (name, value) in self.signer.sign(owner, &Method::GET, &url, b"") {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                request.headers_mut().insert(name, value);
            }
        }
        let connecting = tokio_tungstenite::connect_async(request);
        let upstream = match tokio::time::timeout(std::time::Duration::from_secs(5), connecting)
            .await
            .unwrap_or(Err(tokio_tungstenite::tungstenite::Error::ConnectionClosed))
        {
            Ok((upstream, _)) => upstream,
            Err(error) => {
                self.forward_failures.fetch_add(1, Ordering::Relaxed);
                let error = stead_config::redact::redact_urls(&error.to_string());
                tracing::warn!(%owner, %error, "cluster: cannot open the owner's WebSocket");
                return None;
            }
        };
        self.forwarded_ws.fetch_add(1, Ordering::Relaxed);
        Some(Box::new(
            move |socket: WebSocket,
                  shutdown: tokio::sync::watch::Receiver<bool>,
                  heartbeat: std::time::Duration| {
                let pumping: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
                    Box::pin(pump(upstream, socket, shutdown, heartbeat));
                pumping
            },
        ))
    }

    fn origin(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Origin {
        self.signer.origin(method, uri, headers)
    }

    fn metrics(&self) -> String {
        format!(
            "# HELP stead_cluster_forwarded_total Requests this node forwarded to the session's owner, by kind.\n\
             # TYPE stead_cluster_forwarded_total counter\n\
             stead_cluster_forwarded_total{{kind=\"http\"}} {}\n\
             stead_cluster_forwarded_total{{kind=\"websocket\"}} {}\n\
             # HELP stead_cluster_forward_failures_total Forwards whose owner did not answer.\n\
             # TYPE stead_cluster_forward_failures_total counter\n\
             stead_cluster_forward_failures_total {}\n",
            self.forwarded_http.load(Ordering::Relaxed),
            self.forwarded_ws.load(Ordering::Relaxed),
            self.forward_failures.load(Ordering::Relaxed),
        )
    }
}

/// Frames both ways between the client's socket and the owner's, until either side ends or
/// the client is silent for three `heartbeat`s. The owner's pings reach the client and its
/// pongs the owner; but the owner also hears this side's own answers to its pings, so it is
/// here that a vanished client is noticed.
async fn pump(
    upstream: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    socket: WebSocket,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    heartbeat: std::time::Duration,
) {
    let (mut up_tx, mut up_rx) = upstream.split();
    let (mut client_tx, mut client_rx) = socket.split();
    let started = std::time::Instant::now();
    // When the client was last heard, in milliseconds since `started`.
    let heard = std::sync::atomic::AtomicU64::new(0);
    let client_silent = async {
        let mut tick = tokio::time::interval(heartbeat);
        tick.tick().await;
        loop {
            tick.tick().await;
            let silent = (started.elapsed().as_millis() as u64)
                .saturating_sub(heard.load(Ordering::Relaxed));
            if silent > (heartbeat * 3).as_millis() as u64 {
                tracing::debug!("cluster: a proxied WebSocket client went silent; closing");
                return;
            }
        }
    };
    let to_owner = async {
        while let Some(Ok(message)) = client_rx.next().await {
            heard.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
            let message = match message {
                AxumMessage::Text(text) => WsMessage::text(text.as_str()),
                AxumMessage::Binary(bytes) => WsMessage::binary(bytes),
                AxumMessage::Ping(bytes) => WsMessage::Ping(bytes),
                AxumMessage::Pong(bytes) => WsMessage::Pong(bytes),
                AxumMessage::Close(_) => break,
            };
            if up_tx.send(message).await.is_err() {
                break;
            }
        }
        let _ = up_tx.close().await;
    };
    let to_client = async {
        while let Some(Ok(message)) = up_rx.next().await {
            let message = match message {
                WsMessage::Text(text) => AxumMessage::text(text.as_str()),
                WsMessage::Binary(bytes) => AxumMessage::Binary(bytes),
                WsMessage::Ping(bytes) => AxumMessage::Ping(bytes),
                WsMessage::Pong(bytes) => AxumMessage::Pong(bytes),
                WsMessage::Close(frame) => {
                    let frame = frame.map(|f| axum::extract::ws::CloseFrame {
                        code: f.code.into(),
                        reason: f.reason.as_str().into(),
                    });
                    let _ = client_tx.send(AxumMessage::Close(frame)).await;
                    break;
                }
                WsMessage::Frame(_) => continue,
            };
            if client_tx.send(message).await.is_err() {
                break;
            }
        }
    };
    // Either side ending ends the proxy; so does this node's shutdown, which closes the
    // client's socket with 1001 (it reconnects through another node and resumes).
    enum End {
        Closed,
        Silent,
        Draining,
    }
    let end = tokio::select! {
        () = to_owner => End::Closed,
        () = to_client => End::Closed,
        () = client_silent => End::Silent,
        _ = shutdown.wait_for(|stop| *stop) => End::Draining,
    };
    if matches!(end, End::Silent) {
        let _ = up_tx.close().await;
    }
    if matches!(end, End::Draining) {
        let close = axum::extract::ws::CloseFrame {
            code: 1001,
            reason: "the server is shutting down".into(),
        };
        let _ = client_tx.send(AxumMessage::Close(Some(close))).await;
        let _ = up_tx.close().await;
    }
}

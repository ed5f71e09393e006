//! The WebSocket protocol (docs/api.md) on `GET /v1/sessions/{id}/ws`.
//!
//! A connection attaches to the session's actor as a bounded subscriber and sends `hello`
//! with the seq it attached at. Every frame then goes out in commit order, exactly once per
//! connection: events are de-duplicated by seq (a gap is filled from the journal), stream
//! deltas by their offset in the model call's text. `resume {after_seq}` replays the journal
//! after that seq, then the in-flight stream so far, then live frames. So that a reconnecting
//! client's `resume` is answered in order, live frames are held for a short while after `hello`
//! (until the first client frame, or `ws_resume_hold`); `?after_seq=N` on the URL resumes at
//! once. A client that falls `ws_queue` frames behind is dropped (close 1008), one that stops
//! answering pings too; neither can stall the session or the other clients.

mod connection;
mod frames;
mod sockets;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use uuid::Uuid;

use crate::auth::Caller;
use crate::{ApiError, ApiPath, ApiQuery, AppState, ErrorCode, Principal};
use connection::Connection;
pub use sockets::SessionSockets;

/// Pages of journal replay.
const REPLAY_PAGE: u32 = 1000;
/// Bytes a frame may be on the wire before the transport closes the connection (1009); frames
/// between `ws_frame_bytes` and this get an `error` frame and the connection stays.
const TRANSPORT_MAX: usize = 1 << 20;
/// Initial read buffer of a connection (tungstenite's default is 128 KiB). tungstenite keeps
/// it filled to its capacity, so it is resident for every idle client; a larger frame from the
/// client grows it as needed.
const READ_BUFFER: usize = 512;
/// How long one send may wait on a client that does not read.
const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The upgrade's query. A `token` parameter is read by the `Caller` extractor (and
/// [`crate::auth::presented`]), not here.
#[derive(Deserialize)]
pub struct WsQuery {
    /// A one-minute ticket from `POST /v1/sessions/{id}/ticket` (what browsers send).
    ticket: Option<String>,
    after_seq: Option<i64>,
}

// An axum handler's arguments are its extractors.
#[allow(clippy::too_many_arguments)]
pub async fn upgrade(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<WsQuery>,
    headers: axum::http::HeaderMap,
    uri: axum::http::Uri,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let source = peer.map(|p| p.0 .0.ip().to_string());
    // The session-scoped credential's token generation and expiry, re-checked on every
    // heartbeat: a rotation (or the token's expiry) closes the connection.
    let mut credential: Option<(i64, Option<i64>)> = None;
    let caller = match &query.ticket {
        Some(ticket) => {
            let now = chrono::Utc::now().timestamp();
            let claim = state
                .auth
                .ticket_claim(ticket, now)
                .filter(|claim| claim.session == id)
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::InvalidCredentials,
                        "the ticket is not valid for this session, or it expired (tickets last \
                         a minute: ask POST /v1/sessions/{id}/ticket for a new one)",
                    )
                })?;
            // A rotation since the ticket was issued revokes it too.
            if state.store.get_session(id).await?.token_generation != claim.generation {
                return Err(ApiError::new(
                    ErrorCode::InvalidCredentials,
                    "the session's token was rotated since this ticket was issued",
                ));
            }
            credential = Some((claim.generation, None));
            Principal::Session(id)
        }
        None => {
            let caller = caller?.0;
            if let Principal::Session(_) = caller {
                // Exactly the credential that authenticated the upgrade (whichever header or
                // `?token=` the `Caller` extractor took it from): checked again while open. A
                // session caller whose credential cannot be re-checked gets no socket.
                credential = crate::auth::presented(&headers, &uri)?
                    .and_then(|t| state.auth.session_claim(&t))
                    .map(|c| (c.generation, (c.expires != 0).then_some(c.expires)));
                if credential.is_none() {
                    return Err(ApiError::new(
                        ErrorCode::InvalidCredentials,
                        "this credential cannot be re-checked while a WebSocket is open: \
                         connect with the session token or a ticket",
                    ));
                }
            }
            caller
        }
    };
    caller.require_session(state.store.as_ref(), id).await?;
    state.store.get_session(id).await?;
    // Another node of the cluster holds the session: the socket is proxied to it
    // (docs/cluster.md); the owner checks the credentials again and counts the socket.
    if let Some(cluster) = state.cluster.clone() {
        // The forward middleware verified a node's signature already and refused a bad one:
        // a request that still names a node came from another node, and is never proxied
        // again.
        let from_client = !headers.contains_key(crate::cluster::NODE_HEADER);
        if from_client {
            if let Err(stead_actors::session::SessionError::HeldElsewhere(owner)) =
                state.sessions.session(id).await
            {
                let permit = state
                    .connections
                    .clone()
                    .try_acquire_owned()
                    .map_err(|_| ApiError::unavailable("too many connections"))?;
                // The owner's socket is open (and attached) before the client's upgrade is
                // answered; an owner that cannot be reached leaves the local answer.
                match cluster.proxy_ws(&owner, uri, headers).await {
                    Some(pump) => {
                        let shutdown = state.shutdown.clone();
                        let heartbeat = state.limits.ws_heartbeat;
                        return Ok(upgrade
                            .read_buffer_size(READ_BUFFER)
                            .max_message_size(TRANSPORT_MAX)
                            .max_frame_size(TRANSPORT_MAX)
                            .on_upgrade(move |socket| async move {
                                pump(socket, shutdown, heartbeat).await;
                                drop(permit);
                            }));
                    }
                    None => {
                        return Err(
                            stead_actors::session::SessionError::HeldElsewhere(owner).into()
                        );
                    }
                }
            }
        }
    }
    let per_session = state
        .session_sockets
        .take(id, state.limits.ws_per_session)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::TooManyWebSockets,
                format!(
                    "this session already has {} WebSocket connections",
                    state.limits.ws_per_session
                ),
            )
        })?;
    let permit = state
        .connections
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::unavailable("too many connections"))?;
    Ok(upgrade
        // Small buffers: tens of thousands of mostly idle clients; a big frame grows them.
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(0)
        .max_message_size(TRANSPORT_MAX)
        .max_frame_size(TRANSPORT_MAX)
        .on_upgrade(move |socket| async move {
            let mut connection = Connection::new(state, id, caller, credential, socket, source);
            // Boxed: inline, the connection's future made the task's ~15 KiB (its upvalues, the
            // connection and the run's own state side by side); boxed, ~1.4 KiB plus the run.
            if let Err(reason) = Box::pin(connection.run(query.after_seq)).await {
                tracing::debug!(session = %id, %reason, "websocket closed");
            }
            drop(permit);
            drop(per_session);
        }))
}

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

use std::time::Instant;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
use stead_actors::session::{Frame, Subscription};
use stead_actors::{Input, SessionEvent};
use uuid::Uuid;

use crate::auth::Caller;
use crate::rest::{check_message, decision_input};
use crate::wire::{ClientFrame, EventView, ServerFrame, CLIENT_FRAME_TYPES};
use crate::{ApiError, ApiPath, ApiQuery, AppState, ErrorCode, Principal};

/// Pages of journal replay.
const REPLAY_PAGE: u32 = 1000;
/// Bytes a frame may be on the wire before the transport closes the connection (1009); frames
/// between `ws_frame_bytes` and this get an `error` frame and the connection stays.
const TRANSPORT_MAX: usize = 1 << 20;
/// Initial read buffer of a connection (tungstenite's default is 128 KiB).
const READ_BUFFER: usize = 4 << 10;
/// How long one send may wait on a client that does not read.
const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Deserialize)]
pub struct WsQuery {
    /// A session token (read by the `Caller` extractor, and kept to re-check it while open).
    token: Option<String>,
    /// A one-minute ticket from `POST /v1/sessions/{id}/ticket` (what browsers send).
    ticket: Option<String>,
    after_seq: Option<i64>,
}

pub async fn upgrade(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<WsQuery>,
    headers: axum::http::HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    // The session-scoped credential's token generation and expiry, re-checked on every
    // heartbeat: a rotation (or the token's expiry) closes the connection.
    let mut credential: Option<(i64, Option<i64>)> = None;
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string());
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
                // The token it came with (a header or `?token=`): checked again while open.
                credential = query
                    .token
                    .as_deref()
                    .or(bearer.as_deref())
                    .and_then(|t| state.auth.session_claim(t))
                    .map(|c| (c.generation, (c.expires != 0).then_some(c.expires)));
            }
            caller
        }
    };
    caller.require_session(id)?;
    state.store.get_session(id).await?;
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
            let mut connection = Connection {
                state,
                id,
                caller,
                credential,
                socket,
                sent_seq: 0,
                stream: None,
                ended_call: None,
                held: None,
                last_heard: Instant::now(),
            };
            if let Err(reason) = connection.run(query.after_seq).await {
                tracing::debug!(session = %id, %reason, "websocket closed");
            }
            drop(permit);
            drop(per_session);
        }))
}

/// How many WebSockets each session holds.
#[derive(Default)]
pub struct SessionSockets(std::sync::Mutex<std::collections::HashMap<Uuid, usize>>);

/// One session's WebSocket slot; released on drop.
pub struct SessionSocket {
    sockets: std::sync::Arc<SessionSockets>,
    id: Uuid,
}

impl SessionSockets {
    /// A slot for one more WebSocket of `id`, unless it holds `max` already.
    fn take(self: &std::sync::Arc<Self>, id: Uuid, max: usize) -> Option<SessionSocket> {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.entry(id).or_default();
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(SessionSocket {
            sockets: self.clone(),
            id,
        })
    }

    /// WebSockets `id` holds now.
    pub fn count(&self, id: Uuid) -> usize {
        let counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(&id).copied().unwrap_or(0)
    }
}

impl Drop for SessionSocket {
    fn drop(&mut self) {
        let mut counts = self.sockets.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = counts.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.id);
            }
        }
    }
}

/// The in-flight model call as this connection knows it: its text so far, and how much of
/// that the client has been sent.
struct Stream {
    call_id: String,
    /// The run of the call the text belongs to (see `Frame::Delta`).
    attempt: i64,
    text: String,
    sent: usize,
}

struct Connection {
    state: AppState,
    id: Uuid,
    caller: Principal,
    /// A session token's (or ticket's) generation and the token's expiry (Unix seconds).
    credential: Option<(i64, Option<i64>)>,
    socket: WebSocket,
    /// Highest event seq the client has been sent.
    sent_seq: i64,
    stream: Option<Stream>,
    /// The model call whose end was last sent: late deltas of it are dropped.
    ended_call: Option<String>,
    /// Live frames held until the client's first frame (or the hold ends).
    held: Option<Vec<Frame>>,
    last_heard: Instant,
}

type Closed = String;

impl Connection {
    /// Why the session-scoped credential this connection was opened with no longer holds: the
    /// token was rotated (a new generation) or it expired.
    fn credential_revoked(&self) -> impl std::future::Future<Output = Option<&'static str>> + Send {
        let credential = self.credential;
        let store = self.state.store.clone();
        let id = self.id;
        async move { revoked(store, id, credential?).await }
    }
}

/// Why a connection's credential (generation, expiry) no longer holds.
async fn revoked(
    store: std::sync::Arc<dyn stead_persistence::JournalStore>,
    id: Uuid,
    (generation, expires): (i64, Option<i64>),
) -> Option<&'static str> {
    {
        if expires.is_some_and(|at| at <= chrono::Utc::now().timestamp()) {
            return Some("the session token expired");
        }
        match store.get_session(id).await {
            Ok(row) if row.token_generation != generation => Some("the session token was rotated"),
            Err(stead_persistence::Error::SessionNotFound(_)) => Some("the session is gone"),
            _ => None,
        }
    }
}

impl Connection {
    async fn run(&mut self, after_seq: Option<i64>) -> Result<(), Closed> {
        let mut subscription = match self.attach().await {
            Ok(subscription) => subscription,
            Err(error) => {
                self.send_error(&error).await?;
                return self.close(1011, "the session is unavailable").await;
            }
        };
        let attached = &subscription.attached;
        self.sent_seq = attached.last_seq;
        let attempt = attached.attempt;
        self.stream = attached.streaming.clone().map(|(call_id, text)| Stream {
            call_id,
            attempt,
            text,
            sent: 0,
        });
        self.send_frame(&ServerFrame::Hello {
            session_id: self.id,
            last_seq: attached.last_seq,
            status: attached.status,
        })
        .await?;
        match after_seq {
            Some(after) => self.resume(after).await?,
            None => self.held = Some(Vec::new()),
        }
        let limits = self.state.limits.clone();
        let hold = tokio::time::sleep(limits.ws_resume_hold);
        tokio::pin!(hold);
        let mut heartbeat = tokio::time::interval(limits.ws_heartbeat);
        heartbeat.tick().await;
        let mut shutdown = self.state.shutdown.clone();
        let mut stopping = *shutdown.borrow_and_update();
        if stopping {
            return self.close(1001, "the server is shutting down").await;
        }
        loop {
            tokio::select! {
                incoming = self.socket.recv() => {
                    let Some(Ok(message)) = incoming else {
                        return Err("the client went away".into());
                    };
                    self.last_heard = Instant::now();
                    match message {
                        Message::Text(text) => {
                            let first = self.held.is_some();
                            self.handle(text.as_str(), first).await?;
                        }
                        Message::Binary(_) => {
                            self.release().await?;
                            self.send_error(&ApiError::new(
                                ErrorCode::UnsupportedFrame,
                                "frames are JSON text, not binary",
                            ))
                            .await?;
                        }
                        Message::Close(_) => return Err("closed by the client".into()),
                        Message::Ping(_) | Message::Pong(_) => {}
                    }
                }
                frame = subscription.frames.recv() => match frame {
                    Some(frame) => {
                        if let Some(held) = &mut self.held {
                            held.push(frame);
                        } else {
                            self.deliver(frame).await?;
                        }
                    }
                    None if subscription.lagged.load(std::sync::atomic::Ordering::Relaxed) => {
                        let _ = self.send_error(&ApiError::new(
                            ErrorCode::TooSlow,
                            "this client fell too far behind and is disconnected",
                        )).await;
                        return self.close(1008, "too slow").await;
                    }
                    None => {
                        // The actor stopped (fenced, restarted, failed): attach again and fill
                        // whatever was committed meanwhile from the journal.
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        subscription = match self.attach().await {
                            Ok(s) => s,
                            Err(error) => {
                                self.send_error(&error).await?;
                                return self.close(1011, "the session is unavailable").await;
                            }
                        };
                        let upto = subscription.attached.last_seq;
                        self.replay(self.sent_seq, upto).await?;
                    }
                },
                _ = &mut hold, if self.held.is_some() => self.release().await?,
                _ = heartbeat.tick() => {
                    if self.last_heard.elapsed() > limits.ws_heartbeat * 3 {
                        return self.close(1001, "no answer to pings").await;
                    }
                    if let Some(reason) = self.credential_revoked().await {
                        return self.close(1008, reason).await;
                    }
                    self.send(Message::Ping(Vec::new().into())).await?;
                }
                changed = shutdown.changed(), if !stopping => {
                    if changed.is_err() {
                        stopping = true; // no shutdown signal any more: never stop for it
                        continue;
                    }
                    if !*shutdown.borrow_and_update() {
                        continue;
                    }
                    // Flush what is committed and queued, then say goodbye.
                    self.release().await?;
                    while let Ok(frame) = subscription.frames.try_recv() {
                        self.deliver(frame).await?;
                    }
                    return self.close(1001, "the server is shutting down").await;
                }
            }
        }
    }

    fn attach(&self) -> impl std::future::Future<Output = Result<Subscription, ApiError>> {
        let sessions = self.state.sessions.clone();
        let (id, queue) = (self.id, self.state.limits.ws_queue);
        async move { Ok(sessions.attach(id, queue).await?) }
    }

    /// Ends the hold: the stream so far, then the held frames.
    async fn release(&mut self) -> Result<(), Closed> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        self.flush_stream().await?;
        for frame in held {
            self.deliver(frame).await?;
        }
        Ok(())
    }

    async fn handle(&mut self, text: &str, first: bool) -> Result<(), Closed> {
        if text.len() > self.state.limits.ws_frame_bytes {
            self.release().await?;
            return self
                .send_error(&ApiError::new(
                    ErrorCode::FrameTooLarge,
                    format!(
                        "a frame may be at most {} bytes",
                        self.state.limits.ws_frame_bytes
                    ),
                ))
                .await;
        }
        let frame = match parse(text) {
            Ok(frame) => frame,
            Err(error) => {
                self.release().await?;
                return self.send_error(&error).await;
            }
        };
        if let ClientFrame::Resume { after_seq } = frame {
            if after_seq < 0 {
                self.release().await?;
                return self
                    .send_error(&ApiError::new(
                        ErrorCode::InvalidFrame,
                        "`after_seq` must not be negative",
                    ))
                    .await;
            }
            // The first frame being a resume: replay, then the stream, then what was held.
            if first {
                let held = self.held.take().unwrap_or_default();
                self.resume(after_seq).await?;
                for frame in held {
                    self.deliver(frame).await?;
                }
                return Ok(());
            }
            return self.resume(after_seq).await;
        }
        self.release().await?;
        let input = match frame {
            ClientFrame::UserMessage { text, client_id } => {
                if let Err(error) = check_message(&text, client_id.as_deref()) {
                    return self.send_error(&error).await;
                }
                Input::UserMessage { text, client_id }
            }
            ClientFrame::Approval {
                call_id,
                approved,
                reason,
                scope,
                args_hash,
            } => decision_input(call_id, approved, reason, scope, args_hash, &self.caller),
            ClientFrame::Cancel {} => Input::Cancel {
                reason: format!("cancelled by {}", self.caller.name()),
            },
            ClientFrame::Resume { .. } => unreachable!("handled above"),
        };
        // The effect arrives as committed events on this and every other connection; only a
        // refusal is answered here.
        if let Err(error) = self.state.sessions.send(self.id, input).await {
            return self.send_error(&ApiError::from(error)).await;
        }
        Ok(())
    }

    /// Every event after `after` from the journal, then the in-flight stream from its start.
    async fn resume(&mut self, after: i64) -> Result<(), Closed> {
        self.sent_seq = after;
        self.replay(after, i64::MAX).await?;
        if let Some(stream) = &mut self.stream {
            stream.sent = 0;
        }
        self.flush_stream().await
    }

    /// Sends journal events in `(after, upto]` that the client has not had.
    async fn replay(&mut self, after: i64, upto: i64) -> Result<(), Closed> {
        let mut cursor = after;
        while cursor < upto {
            let page = match self.state.store.read(self.id, cursor, REPLAY_PAGE).await {
                Ok(page) => page,
                Err(error) => return self.send_error(&ApiError::from(error)).await,
            };
            let Some(last) = page.last() else { break };
            cursor = last.seq;
            for event in page.iter().filter(|e| e.seq <= upto) {
                if event.seq <= self.sent_seq {
                    continue;
                }
                self.send_frame(&ServerFrame::Event(EventView::of(event)))
                    .await?;
                self.sent_seq = event.seq;
                if let Some(typed) = SessionEvent::from_parts(&event.kind, &event.payload) {
                    self.ended(&typed);
                }
            }
            if page.len() < REPLAY_PAGE as usize {
                break;
            }
        }
        Ok(())
    }

    /// A live frame, sent at most once and in order.
    async fn deliver(&mut self, frame: Frame) -> Result<(), Closed> {
        match frame {
            Frame::Event {
                seq,
                event,
                at,
                wire,
            } => {
                if seq <= self.sent_seq {
                    return Ok(());
                }
                if seq > self.sent_seq + 1 {
                    self.replay(self.sent_seq, seq - 1).await?;
                }
                // Serialized once per event, whatever the number of clients.
                let text = wire.get_or_init(|| {
                    let frame = ServerFrame::Event(EventView::committed(seq, &event, at));
                    serde_json::to_string(&frame).unwrap_or_default()
                });
                self.send(Message::Text(text.as_str().into())).await?;
                self.sent_seq = seq;
                self.ended(&event);
            }
            Frame::Delta {
                call_id,
                attempt,
                text,
                offset,
            } => {
                if self.ended_call.as_deref() == Some(call_id.as_str()) {
                    return Ok(()); // its final text was already sent in its event
                }
                let stream = match &mut self.stream {
                    Some(stream) if stream.call_id == call_id && stream.attempt == attempt => {
                        stream
                    }
                    // Another call, or a new run of this one: its text starts over.
                    _ => self.stream.insert(Stream {
                        call_id,
                        attempt,
                        text: String::new(),
                        sent: 0,
                    }),
                };
                let end = offset + text.len();
                if end > stream.text.len() && offset <= stream.text.len() {
                    // A delta that does not line up on a character boundary belongs to another
                    // run of the call (an actor restarted it): start its text over.
                    match text.get(stream.text.len() - offset..) {
                        Some(new) => stream.text.push_str(new),
                        None => {
                            stream.text = text;
                            stream.sent = 0;
                        }
                    }
                }
                if self.held.is_none() {
                    self.flush_stream().await?;
                }
            }
        }
        Ok(())
    }

    /// Forgets the stream of a model call that has ended.
    fn ended(&mut self, event: &SessionEvent) {
        let finished = match event {
            SessionEvent::ModelCallFinished { call_id, .. }
            | SessionEvent::ModelCallFailed { call_id, .. } => Some(call_id.as_str()),
            SessionEvent::TurnCancelled { .. }
            | SessionEvent::SessionFailed { .. }
            | SessionEvent::SessionClosed { .. } => None,
            _ => return,
        };
        if let Some(call) = finished {
            self.ended_call = Some(call.to_string());
        }
        if finished.is_none() || self.stream.as_ref().map(|s| s.call_id.as_str()) == finished {
            self.stream = None;
        }
    }

    /// Sends the part of the in-flight stream the client has not had.
    async fn flush_stream(&mut self) -> Result<(), Closed> {
        let Some(stream) = &mut self.stream else {
            return Ok(());
        };
        if stream.sent >= stream.text.len() {
            return Ok(());
        }
        let frame = ServerFrame::Delta {
            call_id: stream.call_id.clone(),
            attempt: stream.attempt,
            text: stream.text[stream.sent..].to_string(),
            offset: stream.sent,
        };
        stream.sent = stream.text.len();
        self.send_frame(&frame).await
    }

    async fn send_error(&mut self, error: &ApiError) -> Result<(), Closed> {
        self.send_frame(&ServerFrame::Error {
            code: error.code,
            message: error.message.clone(),
        })
        .await
    }

    async fn send_frame(&mut self, frame: &ServerFrame) -> Result<(), Closed> {
        let text = serde_json::to_string(frame).unwrap_or_default();
        self.send(Message::Text(text.into())).await
    }

    async fn send(&mut self, message: Message) -> Result<(), Closed> {
        match tokio::time::timeout(SEND_TIMEOUT, self.socket.send(message)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(format!("send failed: {error}")),
            Err(_) => Err("the client does not read".into()),
        }
    }

    async fn close(&mut self, code: u16, reason: &'static str) -> Result<(), Closed> {
        let _ = self
            .send(Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            })))
            .await;
        Err(reason.into())
    }
}

/// A client frame, or the error frame it deserves.
fn parse(text: &str) -> Result<ClientFrame, ApiError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ApiError::new(ErrorCode::InvalidJson, format!("not JSON: {e}")))?;
    let Some(kind) = value
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Err(ApiError::new(
            ErrorCode::InvalidFrame,
            "a frame is a JSON object with a string `type`",
        ));
    };
    if !CLIENT_FRAME_TYPES.contains(&kind.as_str()) {
        return Err(ApiError::new(
            ErrorCode::UnknownFrameType,
            format!(
                "`{kind}` is not a frame type ({})",
                CLIENT_FRAME_TYPES.join(", ")
            ),
        ));
    }
    serde_json::from_value(value)
        .map_err(|e| ApiError::new(ErrorCode::InvalidFrame, format!("bad `{kind}` frame: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use stead_testkit::arbitrary;

    proptest! {
        /// Any text, and any object shaped like a frame: parsed, or refused with one of the
        /// frame error codes and a message — never a panic.
        #[test]
        fn any_frame_text_parses_or_is_refused_clearly(
            text in ".{0,200}",
            shaped in (
                arbitrary::one_of_or_any(&["user_message", "approval", "cancel", "resume"]),
                arbitrary::object_with(&[
                    "text", "client_id", "call_id", "approved", "reason", "scope", "args_hash",
                    "after_seq",
                ]),
            ),
        ) {
            let (kind, mut object) = shaped;
            object["type"] = Value::String(kind);
            for input in [text, object.to_string()] {
                if let Err(error) = parse(&input) {
                    prop_assert!(matches!(
                        error.code,
                        ErrorCode::InvalidJson | ErrorCode::InvalidFrame | ErrorCode::UnknownFrameType
                    ));
                    prop_assert!(!error.message.is_empty());
                }
            }
        }
    }

    #[test]
    fn frames_parse_or_name_what_is_wrong() {
        assert!(matches!(
            parse(r#"{"type":"user_message","text":"hi","client_id":"c1"}"#),
            Ok(ClientFrame::UserMessage { .. })
        ));
        assert!(matches!(
            parse(r#"{"type":"resume","after_seq":3}"#),
            Ok(ClientFrame::Resume { after_seq: 3 })
        ));
        assert!(matches!(
            parse(r#"{"type":"cancel"}"#),
            Ok(ClientFrame::Cancel {})
        ));
        for (text, code) in [
            ("{nope", "invalid_json"),
            ("[1]", "invalid_frame"),
            (r#"{"type":"shout"}"#, "unknown_frame_type"),
            (r#"{"type":"user_message","text":5}"#, "invalid_frame"),
            (r#"{"type":"approval","call_id":"t1"}"#, "invalid_frame"),
            (r#"{"type":"resume","after_seq":"x"}"#, "invalid_frame"),
            (r#"{"type":"cancel","extra":1}"#, "invalid_frame"),
        ] {
            assert_eq!(
                parse(text).err().map(|e| e.code.as_str()),
                Some(code),
                "{text}"
            );
        }
    }
}

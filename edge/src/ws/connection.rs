//! One open WebSocket: attach, `hello`, resume, live frames in commit order, client frames,
//! heartbeats and the credential re-check.

use std::time::Instant;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use stead_actors::session::{Frame, SharedFrame, Subscription};
use stead_actors::{Input, SessionEvent};
use uuid::Uuid;

use super::frames::parse;
use super::{REPLAY_PAGE, SEND_TIMEOUT};
use crate::rest::{check_message, check_overspend, decision_input, Verdict};
use crate::wire::{ClientFrame, EventView, ServerFrame};
use crate::{ApiError, AppState, ErrorCode, Principal};
use stead_model::CallId;

/// The in-flight model call as this connection knows it: its text so far, and how much of
/// that the client has been sent.
struct Stream {
    call_id: CallId,
    /// The run of the call the text belongs to (see `Frame::Delta`).
    attempt: i64,
    text: String,
    sent: usize,
}

pub(super) struct Connection {
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
    held: Option<Vec<SharedFrame>>,
    /// The latest progress of each tool call that runs, sent again on resume.
    progress: std::collections::BTreeMap<CallId, stead_actors::tools::ToolProgress>,
    last_heard: Instant,
    /// When this connection last replayed on a client's `resume` (one per [`RESUME_EVERY`]).
    last_resume: Option<Instant>,
    /// The peer's address, for the audit trail.
    source: Option<String>,
}

/// How often one connection may ask to replay the journal again: a 30-byte `resume` with
/// `after_seq: 0` replays the whole journal, so a loop of them would turn one token into a
/// journal-reading pump.
const RESUME_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

type Closed = String;

impl Connection {
    /// A connection of `caller` to session `id` over `socket`; `credential` is the session
    /// token's (or ticket's) generation and expiry, re-checked on every heartbeat.
    pub(super) fn new(
        state: AppState,
        id: Uuid,
        caller: Principal,
        credential: Option<(i64, Option<i64>)>,
        socket: WebSocket,
        source: Option<String>,
    ) -> Self {
        Connection {
            state,
            id,
            caller,
            credential,
            socket,
            sent_seq: 0,
            stream: None,
            ended_call: None,
            held: None,
            progress: Default::default(),
            last_heard: Instant::now(),
            last_resume: None,
            source,
        }
    }

    /// Why the credential this connection was opened with no longer holds: a session token
    /// was rotated (a new generation) or expired; a project's key was revoked or expired; a
    /// signed-in person's token expired.
    fn credential_revoked(&self) -> impl std::future::Future<Output = Option<&'static str>> + Send {
        let credential = self.credential;
        let store = self.state.store.clone();
        let keys = self.state.keys.clone();
        let key = match &self.caller {
            Principal::ProjectKey(key) => Some(key.clone()),
            _ => None,
        };
        // A signed-in person's connection lasts as long as the token that opened it.
        let token_expires = match &self.caller {
            Principal::User(user) => Some(user.expires_at),
            _ => None,
        };
        let id = self.id;
        async move {
            if token_expires.is_some_and(|at| at <= chrono::Utc::now().timestamp()) {
                return Some("the sign-in token expired");
            }
            if let Some(key) = key {
                return keys.no_longer_valid(&key).await;
            }
            revoked(store, id, credential?).await
        }
    }
}

/// Why a connection's credential (generation, expiry) no longer holds.
async fn revoked(
    store: std::sync::Arc<dyn stead_persistence::Sessions>,
    id: Uuid,
    (generation, expires): (i64, Option<i64>),
) -> Option<&'static str> {
    if expires.is_some_and(|at| at <= chrono::Utc::now().timestamp()) {
        return Some("the session token expired");
    }
    match store.get_session(id).await {
        Ok(row) if row.token_generation != generation => Some("the session token was rotated"),
        Err(stead_persistence::Error::SessionNotFound(_)) => Some("the session is gone"),
        _ => None,
    }
}

impl Connection {
    pub(super) async fn run(&mut self, after_seq: Option<i64>) -> Result<(), Closed> {
        let mut subscription = match Box::pin(self.attach()).await {
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
        self.progress = attached.progress.iter().cloned().collect();
        self.send_frame(&ServerFrame::Hello {
            session_id: self.id,
            last_seq: attached.last_seq,
            status: attached.status,
        })
        .await?;
        match after_seq {
            Some(after) => Box::pin(self.resume(after)).await?,
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
                            // Cold paths are boxed: an idle connection's future holds only the
                            // largest *inline* await, and tens of thousands of them sit idle.
                            Box::pin(self.handle(text.as_str(), first)).await?;
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
                        subscription = match Box::pin(self.attach()).await {
                            Ok(s) => s,
                            Err(error) => {
                                self.send_error(&error).await?;
                                return self.close(1011, "the session is unavailable").await;
                            }
                        };
                        let upto = subscription.attached.last_seq;
                        Box::pin(self.replay(self.sent_seq, upto)).await?;
                    }
                },
                _ = &mut hold, if self.held.is_some() => Box::pin(self.release()).await?,
                _ = heartbeat.tick() => {
                    if self.last_heard.elapsed() > limits.ws_heartbeat * 3 {
                        return self.close(1001, "no answer to pings").await;
                    }
                    if let Some(reason) = Box::pin(self.credential_revoked()).await {
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
        self.send_progress().await?;
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
            if self
                .last_resume
                .is_some_and(|at| at.elapsed() < RESUME_EVERY)
            {
                return self
                    .send_error(&ApiError::new(
                        ErrorCode::RateLimited,
                        format!(
                            "one `resume` per {} s on a connection: wait, or open a new one",
                            RESUME_EVERY.as_secs()
                        ),
                    ))
                    .await;
            }
            self.last_resume = Some(Instant::now());
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
            ClientFrame::UserMessage {
                text,
                client_id,
                mode,
                attachments,
            } => {
                if let Err(error) = check_message(&text, client_id.as_deref()) {
                    return self.send_error(&error).await;
                }
                let attachments =
                    match crate::artifacts::attachments(&self.state, self.id, &attachments).await {
                        Ok(attachments) => attachments,
                        Err(error) => return self.send_error(&error).await,
                    };
                Input::UserMessage {
                    text,
                    client_id,
                    mode,
                    attachments,
                }
            }
            ClientFrame::Approval {
                call_id,
                approved,
                reason,
                scope,
                args_hash,
                overspend_usd,
            } => {
                if let Err(error) = check_overspend(overspend_usd) {
                    return self.send_error(&error).await;
                }
                let verdict = Verdict {
                    approved,
                    reason,
                    scope,
                    args_hash,
                    overspend_usd,
                };
                decision_input(call_id, verdict, &self.caller)
            }
            ClientFrame::Cancel {} => Input::Cancel {
                reason: format!("cancelled by {}", self.caller.name()),
            },
            ClientFrame::Resume { .. } => unreachable!("handled above"),
        };
        let act = crate::audit::ws_act(
            &self.state,
            self.id,
            &self.caller,
            self.source.clone(),
            &input,
        )
        .await;
        // The effect arrives as committed events on this and every other connection; only a
        // refusal is answered here.
        if let Err(error) = self.state.sessions.send(self.id, input).await {
            return self.send_error(&ApiError::from(error)).await;
        }
        if let Some(act) = act {
            crate::audit::append(&self.state, act).await;
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
        self.flush_stream().await?;
        self.send_progress().await
    }

    /// The latest progress of every tool call that runs.
    async fn send_progress(&mut self) -> Result<(), Closed> {
        let frames: Vec<ServerFrame> = self
            .progress
            .iter()
            .map(|(call_id, progress)| ServerFrame::tool_progress(call_id, progress))
            .collect();
        for frame in frames {
            self.send_frame(&frame).await?;
        }
        Ok(())
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
    async fn deliver(&mut self, frame: SharedFrame) -> Result<(), Closed> {
        match &*frame {
            &Frame::Event {
                seq,
                ref event,
                at,
                ref wire,
            } => {
                if seq <= self.sent_seq {
                    return Ok(());
                }
                if seq > self.sent_seq + 1 {
                    // A gap (an actor restarted): cold, so boxed out of the future.
                    Box::pin(self.replay(self.sent_seq, seq - 1)).await?;
                }
                // Serialized once per event, whatever the number of clients.
                let text = wire.get_or_init(|| {
                    let frame = ServerFrame::Event(EventView::committed(seq, event, at));
                    serde_json::to_string(&frame).unwrap_or_default()
                });
                self.send(Message::Text(text.as_str().into())).await?;
                self.sent_seq = seq;
                self.ended(event);
            }
            &Frame::Delta {
                ref call_id,
                attempt,
                ref text,
                offset,
            } => {
                if self.ended_call.as_deref() == Some(call_id.as_str()) {
                    return Ok(()); // its final text was already sent in its event
                }
                let stream = match &mut self.stream {
                    Some(stream) if stream.call_id == *call_id && stream.attempt == attempt => {
                        stream
                    }
                    // Another call, or a new run of this one: its text starts over.
                    _ => self.stream.insert(Stream {
                        call_id: call_id.clone(),
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
                            stream.text.clone_from(text);
                            stream.sent = 0;
                        }
                    }
                }
                if self.held.is_none() {
                    self.flush_stream().await?;
                }
            }
            Frame::Progress { call_id, progress } => {
                let frame = ServerFrame::tool_progress(call_id, progress);
                self.progress.insert(call_id.clone(), (**progress).clone());
                if self.held.is_none() {
                    self.send_frame(&frame).await?;
                }
            }
        }
        Ok(())
    }

    /// Forgets the stream of a model call that has ended, and the progress of tool calls.
    fn ended(&mut self, event: &SessionEvent) {
        match event {
            SessionEvent::ToolCallFinished { call_id, .. }
            | SessionEvent::ToolCallFailed { call_id, .. }
            | SessionEvent::ToolCallCancelled { call_id, .. } => {
                self.progress.remove(call_id);
            }
            SessionEvent::TurnCancelled { .. }
            | SessionEvent::TurnFinished { .. }
            | SessionEvent::SessionFailed { .. }
            | SessionEvent::SessionClosed { .. } => self.progress.clear(),
            _ => {}
        }
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

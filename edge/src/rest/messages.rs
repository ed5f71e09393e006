//! `/v1/sessions/{id}/messages` (start a turn, optionally waiting for it) and
//! `/v1/sessions/{id}/events` (the journal, paged).

use std::sync::atomic::Ordering;

use stead_actors::session::Frame;

use super::*;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostMessage {
    /// Up to 32 KiB of UTF-8 (the schema says 8,192 characters, which always fits).
    #[schema(min_length = 1, max_length = 8192, pattern = "\\S")]
    text: String,
    /// Applied once: a repeated `client_id` is refused with `duplicate_client_id`.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200)]
    client_id: Option<String>,
    /// While a turn runs: `queue`, `interrupt`, `steer` or `drop_if_busy` (default: the agent's
    /// `message_mode`).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    mode: Option<MessageMode>,
    /// Artifacts of the session (or of its project) the message carries, at most 8
    /// (docs/artifacts.md, "Attachments"): images are shown to a model that sees them.
    #[serde(default)]
    #[schema(max_items = 8)]
    attachments: Vec<crate::wire::AttachmentRef>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    #[serde(default)]
    wait: bool,
}

/// Checks a user message's text and client id (shared with the WebSocket).
pub fn check_message(text: &str, client_id: Option<&str>) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "`text` must not be empty",
        ));
    }
    if text.contains('\0') {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "`text` must not contain a NUL character (\\u0000)",
        ));
    }
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(ApiError::new(
            ErrorCode::MessageTooLarge,
            format!("`text` is over {MAX_MESSAGE_BYTES} bytes"),
        ));
    }
    if client_id.is_some_and(|c| c.is_empty() || c.len() > 200) {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "`client_id` must be 1 to 200 bytes",
        ));
    }
    Ok(())
}

#[utoipa::path(post, path = "/v1/sessions/{id}/messages", params(("id" = Uuid, Path, description = "Session id"), WaitQuery), request_body = PostMessage, responses((status = 202, description = "Accepted (or the wait ran out)", body = MessageAccepted), (status = 200, description = "With wait=true: the turn ended or parked", body = MessageWaited), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn post_message(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<WaitQuery>,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<Response, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    check_message(&body.text, body.client_id.as_deref())?;
    let attachments = crate::artifacts::attachments(&state, id, &body.attachments).await?;
    // Attach before sending, so the wait sees every frame the message causes. A session
    // holds at most `max_websockets_per_session` waits at once (each is a subscriber of its
    // actor); past that the message is sent and answered 202 at once, as when a wait runs
    // out (waits were unbounded).
    let waiting = query
        .wait
        .then(|| state.session_waits.take(id, state.limits.ws_per_session))
        .flatten();
    let mut subscription = match &waiting {
        Some(_) => Some(state.sessions.attach(id, 65_536).await?),
        None => None,
    };
    let seq = state
        .sessions
        .send(
            id,
            Input::UserMessage {
                text: body.text,
                client_id: body.client_id,
                mode: body.mode,
                attachments,
            },
        )
        .await?;
    let Some(subscription) = &mut subscription else {
        return Ok((
            StatusCode::ACCEPTED,
            Json(MessageAccepted {
                session_id: id,
                seq,
            }),
        )
            .into_response());
    };
    // Wait for the turn (and any queued before it) to end, or to park on an approval. The
    // reply comes from the frames the wait holds; a wait that had to attach again (the actor
    // restarted) or fell behind may have missed some, and reads the journal instead.
    let deadline = tokio::time::Instant::now() + state.limits.wait;
    let mut settled = false;
    let mut look = true;
    let mut reply = Reply::after(seq);
    loop {
        if look {
            let folded = state.sessions.state(id).await?;
            if folded.last_seq >= seq && folded.status() != SessionStatus::Running {
                settled = true;
                break;
            }
        }
        match tokio::time::timeout_at(deadline, subscription.frames.recv()).await {
            // Only a committed event can end or park the turn; stream deltas cannot.
            Ok(Some(frame)) => look = reply.see(&frame),
            Ok(None) => {
                // The actor stopped (a restart): attach again and look at the state.
                tokio::time::sleep(Duration::from_millis(50)).await;
                *subscription = state.sessions.attach(id, 65_536).await?;
                reply.missed_some = true;
                look = true;
            }
            Err(_) => break,
        }
    }
    let folded = state.sessions.state(id).await?;
    // Every frame up to `folded.last_seq` was sent before the state answered: take them.
    while let Ok(frame) = subscription.frames.try_recv() {
        reply.see(&frame);
    }
    let reply = if reply.missed_some || subscription.lagged.load(Ordering::Relaxed) {
        last_reply(&state, id, seq).await?
    } else {
        reply.text
    };
    let status = if settled {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((
        status,
        Json(MessageWaited {
            session_id: id,
            seq,
            status: folded.status(),
            last_seq: folded.last_seq,
            reply,
            pending_approvals: pending_view(&folded),
        }),
    )
        .into_response())
}

/// The last assistant message after `seq`, as a wait sees it in the frames it receives.
struct Reply {
    after: i64,
    text: Option<String>,
    /// Frames may have been missed (the wait attached again): the journal is read instead.
    missed_some: bool,
}

impl Reply {
    fn after(seq: i64) -> Self {
        Reply {
            after: seq,
            text: None,
            missed_some: false,
        }
    }

    /// Takes the reply from `frame`; whether it was a committed event (which may end the turn).
    fn see(&mut self, frame: &Frame) -> bool {
        let Frame::Event { seq, event, .. } = frame else {
            return false;
        };
        if let SessionEvent::AssistantMessage { text, .. } = event.as_ref() {
            if *seq > self.after {
                self.text = Some(text.clone());
            }
        }
        true
    }
}

/// The last assistant message journaled after `seq`.
pub(crate) async fn last_reply(
    state: &AppState,
    id: Uuid,
    seq: i64,
) -> Result<Option<String>, ApiError> {
    let mut reply = None;
    let mut after = seq;
    loop {
        let page = state.store.read(id, after, MAX_EVENTS_PAGE).await?;
        for event in &page {
            if event.kind == "assistant_message" {
                reply = event.payload["text"].as_str().map(str::to_string);
            }
        }
        match page.last() {
            Some(last) if page.len() == MAX_EVENTS_PAGE as usize => after = last.seq,
            _ => return Ok(reply),
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Events with a greater seq (default 0: from the start).
    #[param(minimum = 0)]
    after: Option<i64>,
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/sessions/{id}/events", params(("id" = Uuid, Path, description = "Session id"), EventsQuery), responses((status = 200, body = EventsPage), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Json<EventsPage>, ApiError> {
    caller
        .require_session_tree(state.store.as_ref(), id)
        .await?;
    let after = query.after.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::new(
            ErrorCode::InvalidQuery,
            "`after` must not be negative",
        ));
    }
    let limit = page_limit(query.limit, 100, MAX_EVENTS_PAGE)?;
    let row = state.store.get_session(id).await?;
    let events = state.store.read(id, after, limit).await?;
    Ok(Json(EventsPage {
        events: events.iter().map(event_view).collect(),
        last_seq: row.last_seq,
        compacted_through: state.store.compaction(id).await?.map(|c| c.through_seq),
    }))
}

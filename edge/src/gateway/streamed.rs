//! A streamed router call from an HTTP handler, shared by the three chat APIs (OpenAI chat
//! completions, Anthropic messages, OpenAI responses): the call runs in a task; the answer
//! starts once the first text arrives (or the call ends), so a call refused or failed before
//! any text still gets its HTTP status; each API turns the steps into its own server-sent events.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use stead_router::{CallOptions, RouterError, RouterRequest, RouterResponse};
use tokio::sync::mpsc;

use crate::ApiError;

/// What a streamed call reports.
pub(crate) enum Step {
    Text(String),
    Done(Box<Result<RouterResponse, RouterError>>),
}

/// A streamed call whose first step has come.
pub(crate) struct Streamed {
    first: Step,
    rest: mpsc::UnboundedReceiver<Step>,
}

/// Why a streamed call has no answer to stream.
pub(crate) enum Refused {
    /// The router refused or every target failed before any text.
    Router(RouterError),
    Internal(ApiError),
}

/// Starts `request` streamed and waits for its first step.
pub(crate) async fn start(
    router: Arc<stead_router::Router>,
    request: RouterRequest,
    options: CallOptions,
) -> Result<Streamed, Refused> {
    let (steps_tx, mut steps) = mpsc::unbounded_channel::<Step>();
    let task = tokio::spawn(async move {
        let (deltas, mut texts) = mpsc::unbounded_channel::<String>();
        let call = router.call(request, options, Some(deltas));
        tokio::pin!(call);
        let result = loop {
            tokio::select! {
                biased;
                Some(text) = texts.recv() => {
                    if steps_tx.send(Step::Text(text)).is_err() {
                        // The client went away: dropping the call stops it.
                        return;
                    }
                }
                result = &mut call => break result,
                _ = steps_tx.closed() => return,
            }
        };
        while let Ok(text) = texts.try_recv() {
            let _ = steps_tx.send(Step::Text(text));
        }
        let _ = steps_tx.send(Step::Done(Box::new(result)));
    });
    match steps.recv().await {
        None => Err(Refused::Internal(ApiError::internal(
            "the model call stopped",
            format!("{:?}", task.await.err()),
        ))),
        Some(Step::Done(result)) => match *result {
            Err(error) => Err(Refused::Router(error)),
            Ok(answer) => Ok(Streamed {
                first: Step::Done(Box::new(Ok(answer))),
                rest: steps,
            }),
        },
        Some(first) => Ok(Streamed { first, rest: steps }),
    }
}

/// The server-sent events of a streamed call: `encode` turns each step into events (it is
/// called once with the `Done` step, last). The answer carries `x-stead-request-id` (the log
/// record's id); who answered comes in the last events, once known.
pub(crate) fn sse<F>(streamed: Streamed, request_id: uuid::Uuid, encode: F) -> Response
where
    F: FnMut(Step) -> Vec<Event> + Send + 'static,
{
    let events = futures_util::stream::unfold(
        (Some(streamed.first), streamed.rest, encode, false),
        |(pending, mut rest, mut encode, finished)| async move {
            if finished {
                return None;
            }
            let step = match pending {
                Some(step) => step,
                None => rest.recv().await?,
            };
            let done = matches!(step, Step::Done(_));
            let events: Vec<Result<Event, Infallible>> = encode(step).into_iter().map(Ok).collect();
            Some((
                futures_util::stream::iter(events),
                (None, rest, encode, done),
            ))
        },
    )
    .flatten();
    let mut response = Sse::new(events).into_response();
    super::set(
        response.headers_mut(),
        "x-stead-request-id",
        &request_id.to_string(),
    );
    response
}

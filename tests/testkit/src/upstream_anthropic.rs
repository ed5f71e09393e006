//! Test double: the upstream's `POST /v1/messages`, answering the same scripted [`Reply`]s in
//! Anthropic's Messages shapes — a `message` with `text`/`tool_use` blocks, or its event stream
//! (`message_start`, `content_block_*` with a `text_delta` per word, `message_delta`,
//! `message_stop`); HTTP errors in Anthropic's envelope. Requests without `anthropic-version`
//! are refused (400), as the real API does; each request's `x-api-key` is recorded.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::upstream::{sse, Reply, Shared};

fn event(data: Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap_or("unknown")
    )
}

fn error(status: u16, kind: &str, message: &str) -> Response {
    (
        StatusCode::from_u16(status).expect("a status"),
        Json(json!({ "type": "error", "error": { "type": kind, "message": message } })),
    )
        .into_response()
}

pub(crate) async fn messages(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    shared.requests.lock().expect("requests").push(body.clone());
    shared.anthropic_keys.lock().expect("keys").push(
        headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(String::from),
    );
    if !headers.contains_key("anthropic-version") {
        return error(
            400,
            "invalid_request_error",
            "anthropic-version: header is required",
        );
    }
    let stream = body["stream"].as_bool().unwrap_or(false);
    let (text, calls, completion_tokens, chunk_delay) = match shared.reply(&body) {
        Reply::Status { status, .. } => {
            return error(status, "overloaded_error", &format!("scripted {status}"))
        }
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return StatusCode::GATEWAY_TIMEOUT.into_response();
        }
        Reply::Tool { name, arguments } => {
            (String::new(), vec![(name, arguments)], 7, Duration::ZERO)
        }
        Reply::Tools(calls) => (String::new(), calls, 7, Duration::ZERO),
        Reply::Text {
            text,
            delay,
            chunk_delay,
            completion_tokens,
        } => {
            tokio::time::sleep(delay).await;
            (text, Vec::new(), completion_tokens, chunk_delay)
        }
        Reply::Cut { text } => {
            let mut events = vec![event(
                json!({ "type": "message_start", "message": { "model": "claude-double", "usage": { "input_tokens": 5, "output_tokens": 1 } } }),
            )];
            events.push(event(json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } })));
            for word in text.split_inclusive(' ') {
                events.push(event(json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": word } })));
            }
            return sse(Body::from(events.concat()));
        }
    };
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    let uses: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, input))| json!({ "type": "tool_use", "id": format!("toolu_double_{i}"), "name": name, "input": input }))
        .collect();
    if !stream {
        let mut content = Vec::new();
        if !text.is_empty() {
            content.push(json!({ "type": "text", "text": text }));
        }
        content.extend(uses);
        return Json(json!({
            "id": "msg_double", "type": "message", "role": "assistant", "model": "claude-double",
            "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": { "input_tokens": 5, "output_tokens": completion_tokens },
        }))
        .into_response();
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::convert::Infallible>>(64);
    tokio::spawn(async move {
        let mut send = vec![event(
            json!({ "type": "message_start", "message": { "id": "msg_double", "type": "message", "role": "assistant", "model": "claude-double", "content": [], "usage": { "input_tokens": 5, "output_tokens": 1 } } }),
        )];
        let mut index = 0;
        if !text.is_empty() {
            send.push(event(json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } })));
            for item in send.drain(..) {
                if tx.send(Ok(item)).await.is_err() {
                    return;
                }
            }
            for word in text.split_inclusive(' ') {
                let delta = event(
                    json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": word } }),
                );
                if tx.send(Ok(delta)).await.is_err() {
                    return;
                }
                tokio::time::sleep(chunk_delay).await;
            }
            send.push(event(json!({ "type": "content_block_stop", "index": 0 })));
            index = 1;
        }
        for use_ in uses {
            let input = use_["input"].to_string();
            let mut start = use_.clone();
            start["input"] = json!({});
            send.push(event(
                json!({ "type": "content_block_start", "index": index, "content_block": start }),
            ));
            // The input in two pieces, as the API splits it.
            let middle = input.len() / 2;
            let (first, second) = input.split_at(
                input
                    .char_indices()
                    .map(|(i, _)| i)
                    .find(|i| *i >= middle)
                    .unwrap_or(0),
            );
            for piece in [first, second] {
                send.push(event(json!({ "type": "content_block_delta", "index": index, "delta": { "type": "input_json_delta", "partial_json": piece } })));
            }
            send.push(event(
                json!({ "type": "content_block_stop", "index": index }),
            ));
            index += 1;
        }
        send.push(event(json!({ "type": "message_delta", "delta": { "stop_reason": stop, "stop_sequence": null }, "usage": { "output_tokens": completion_tokens } })));
        send.push(event(json!({ "type": "message_stop" })));
        for item in send {
            if tx.send(Ok(item)).await.is_err() {
                return;
            }
        }
    });
    sse(Body::from_stream(futures_util::stream::unfold(
        rx,
        |mut rx| async { rx.recv().await.map(|item| (item, rx)) },
    )))
}

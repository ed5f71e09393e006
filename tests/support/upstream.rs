//! Test double: a scriptable OpenAI-compatible upstream on loopback for the model router's
//! tests. Each request takes the next scripted [`Reply`] (or the default once the script is
//! used up): an answer (streamed as SSE chunks when the request asks for a stream, else one
//! `chat.completion`), an HTTP error with an optional `Retry-After`, a hang, or a stream cut off
//! after some text. It records every request body. It runs no model.
//!
//! Shared by `inference/tests/router.rs` and the root package's tests via `#[path]`.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// What the upstream does with one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Answers `text` (streamed one word per chunk, `chunk_delay` apart), after `delay`.
    Text {
        text: String,
        delay: Duration,
        chunk_delay: Duration,
        completion_tokens: u64,
    },
    /// Answers with one tool call.
    Tool { name: String, arguments: Value },
    /// An HTTP error, with `Retry-After: secs` when given.
    Status {
        status: u16,
        retry_after: Option<u64>,
    },
    /// Never answers.
    Hang,
    /// Streams `text` and then ends the body without finishing the answer.
    Cut { text: String },
}

impl Reply {
    pub fn text(text: &str) -> Reply {
        Reply::Text {
            text: text.into(),
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            completion_tokens: text.split_inclusive(' ').count() as u64,
        }
    }

    pub fn slow_text(text: &str, delay: Duration) -> Reply {
        Reply::Text {
            text: text.into(),
            delay,
            chunk_delay: Duration::ZERO,
            completion_tokens: text.split_inclusive(' ').count() as u64,
        }
    }

    pub fn status(status: u16) -> Reply {
        Reply::Status {
            status,
            retry_after: None,
        }
    }
}

#[derive(Clone)]
struct Shared {
    script: Arc<Mutex<VecDeque<Reply>>>,
    default: Reply,
    requests: Arc<Mutex<Vec<Value>>>,
}

/// A running upstream double; it serves until the test's runtime shuts down.
pub struct Upstream {
    /// The API root, e.g. `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    script: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Upstream {
    /// Starts on a free port; `script` is used in order, then `default` for every request.
    pub async fn start(script: Vec<Reply>, default: Reply) -> Upstream {
        let shared = Shared {
            script: Arc::new(Mutex::new(script.into())),
            default,
            requests: Arc::new(Mutex::new(Vec::new())),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the upstream double");
        let address = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, app).await.expect("upstream double") });
        Upstream {
            base_url: format!("http://{address}/v1"),
            script: shared.script,
            requests: shared.requests,
        }
    }

    /// The request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("requests").clone()
    }

    /// `stead.toml` text with this double as the `openai` provider `up` behind route `route`
    /// (`target`: the rest of the target's inline table, e.g. `model = "m"`), then `extra`.
    pub fn config(&self, route: &str, target: &str, extra: &str) -> String {
        format!(
            "[[providers]]\nname = \"up\"\nkind = \"openai\"\nbase_url = \"{}\"\n\n\
             [[routes]]\nname = \"{route}\"\ntargets = [{{ provider = \"up\", {target} }}]\n\n{extra}",
            self.base_url
        )
    }

    /// Appends replies to the script.
    pub fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        self.script.lock().expect("script").extend(replies);
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-double",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "double-model",
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
    });
    format!("data: {chunk}\n\n")
}

async fn chat(State(shared): State<Shared>, Json(body): Json<Value>) -> Response {
    shared.requests.lock().expect("requests").push(body.clone());
    let reply = shared
        .script
        .lock()
        .expect("script")
        .pop_front()
        .unwrap_or_else(|| shared.default.clone());
    let stream = body["stream"].as_bool().unwrap_or(false);
    match reply {
        Reply::Status {
            status,
            retry_after,
        } => {
            let mut response = (
                StatusCode::from_u16(status).expect("a status"),
                Json(json!({ "error": { "message": format!("scripted {status}"), "type": "scripted" } })),
            )
                .into_response();
            if let Some(secs) = retry_after {
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    secs.to_string().parse().expect("header"),
                );
            }
            response
        }
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        Reply::Tool { name, arguments } => {
            let call = json!({
                "id": "call_double",
                "type": "function",
                "function": { "name": name, "arguments": arguments.to_string() },
            });
            if stream {
                let mut indexed = call.clone();
                indexed["index"] = json!(0);
                let body = [
                    chunk(json!({ "tool_calls": [indexed] }), None),
                    chunk(json!({}), Some("tool_calls")),
                    format!(
                        "data: {}\n\n",
                        json!({ "choices": [], "usage": { "prompt_tokens": 5, "completion_tokens": 7 } })
                    ),
                    "data: [DONE]\n\n".to_string(),
                ]
                .concat();
                sse(Body::from(body))
            } else {
                Json(json!({
                    "id": "chatcmpl-double",
                    "object": "chat.completion",
                    "model": "double-model",
                    "choices": [{
                        "index": 0,
                        "message": { "role": "assistant", "content": null, "tool_calls": [call] },
                        "finish_reason": "tool_calls",
                    }],
                    "usage": { "prompt_tokens": 5, "completion_tokens": 7 },
                }))
                .into_response()
            }
        }
        Reply::Text {
            text,
            delay,
            chunk_delay,
            completion_tokens,
        } => {
            tokio::time::sleep(delay).await;
            let usage = json!({ "prompt_tokens": 5, "completion_tokens": completion_tokens });
            if !stream {
                return Json(json!({
                    "id": "chatcmpl-double",
                    "object": "chat.completion",
                    "model": "double-model",
                    "choices": [{
                        "index": 0,
                        "message": { "role": "assistant", "content": text },
                        "finish_reason": "stop",
                    }],
                    "usage": usage,
                }))
                .into_response();
            }
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, Infallible>>(64);
            tokio::spawn(async move {
                for word in text.split_inclusive(' ') {
                    if tx
                        .send(Ok(chunk(json!({ "content": word }), None)))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    tokio::time::sleep(chunk_delay).await;
                }
                let _ = tx.send(Ok(chunk(json!({}), Some("stop")))).await;
                let _ = tx
                    .send(Ok(format!(
                        "data: {}\n\n",
                        json!({ "choices": [], "usage": usage })
                    )))
                    .await;
                let _ = tx.send(Ok("data: [DONE]\n\n".into())).await;
            });
            sse(Body::from_stream(futures_util::stream::unfold(
                rx,
                |mut rx| async { rx.recv().await.map(|item| (item, rx)) },
            )))
        }
        Reply::Cut { text } => {
            let body: String = text
                .split_inclusive(' ')
                .map(|word| chunk(json!({ "content": word }), None))
                .collect();
            // The body ends here: no finish_reason, no [DONE].
            sse(Body::from(body))
        }
    }
}

fn sse(body: Body) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(body)
        .expect("response")
}

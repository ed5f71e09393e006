//! Test double: a fake OpenAI-compatible chat completions server. It answers
//! `POST /v1/chat/completions` with a scripted answer streamed as OpenAI streams it (SSE
//! `chat.completion.chunk`s, then the usage chunk when the request asked for it, then
//! `data: [DONE]`), and records every request body. It runs no model: what it says is whatever
//! the test's script returns for the request.
//!
//! Include it from an integration test with
//! `#[path = "support/fake_openai.rs"] mod fake_openai;`.

#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// What the fake answers to one request.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// Text streamed one word (with its trailing space) per chunk, `chunk_delay` apart.
    Text { text: String, chunk_delay: Duration },
    /// One tool call, sent whole in a single `tool_calls` delta.
    ToolCall { name: String, arguments: Value },
}

/// Decides the answer from the request body.
pub type Script = Arc<dyn Fn(&Value) -> Scripted + Send + Sync>;

/// A running fake; it serves until the test's runtime shuts down.
pub struct FakeOpenAi {
    /// The API root, e.g. `http://127.0.0.1:PORT/v1`, as `OpenAiModel::base_url` takes it.
    pub base_url: String,
    /// Every request body received, in arrival order.
    pub requests: Arc<Mutex<Vec<Value>>>,
}

#[derive(Clone)]
struct Fake {
    script: Script,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl FakeOpenAi {
    /// Starts the fake on a free port of 127.0.0.1.
    pub async fn start(script: Script) -> FakeOpenAi {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .with_state(Fake {
                script,
                requests: requests.clone(),
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake OpenAI server");
        let address = listener.local_addr().expect("the fake's address");
        tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("the fake OpenAI server failed")
        });
        FakeOpenAi {
            base_url: format!("http://{address}/v1"),
            requests,
        }
    }

    /// The request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("requests lock").clone()
    }
}

async fn chat_completions(State(fake): State<Fake>, Json(body): Json<Value>) -> impl IntoResponse {
    fake.requests
        .lock()
        .expect("requests lock")
        .push(body.clone());
    let scripted = (fake.script)(&body);
    let (events, receiver) = mpsc::channel::<String>(16);
    tokio::spawn(stream_answer(body, scripted, events));
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let event = receiver.recv().await;
        event.map(|event| (Ok::<_, Infallible>(event), receiver))
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
}

/// Sends the answer's events; stops early when the client goes away.
async fn stream_answer(request: Value, scripted: Scripted, events: mpsc::Sender<String>) {
    let model = request["model"]
        .as_str()
        .unwrap_or("fake-model")
        .to_string();
    let chunk = |delta: Value, finish_reason: Option<&str>| {
        json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason }],
        })
    };
    let mut chunks = vec![chunk(json!({ "role": "assistant", "content": "" }), None)];
    let (delay, completion_tokens, finish_reason) = match scripted {
        Scripted::Text { text, chunk_delay } => {
            let words: Vec<&str> = text.split_inclusive(' ').collect();
            chunks.extend(
                words
                    .iter()
                    .map(|word| chunk(json!({ "content": word }), None)),
            );
            (chunk_delay, words.len(), "stop")
        }
        Scripted::ToolCall { name, arguments } => {
            chunks.push(chunk(
                json!({
                    "content": null,
                    "tool_calls": [{
                        "index": 0,
                        "id": "call_fake_0",
                        "type": "function",
                        "function": { "name": name, "arguments": arguments.to_string() },
                    }],
                }),
                None,
            ));
            (Duration::ZERO, 1, "tool_calls")
        }
    };
    chunks.push(chunk(json!({}), Some(finish_reason)));
    if request["stream_options"]["include_usage"] == json!(true) {
        let prompt_tokens = prompt_tokens(&request);
        chunks.push(json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }));
    }

    // Chunk 0 opens the message; the delay falls between the content chunks 1..=n.
    let delayed = 1..completion_tokens;
    for (i, chunk) in chunks.into_iter().enumerate() {
        if events.send(format!("data: {chunk}\n\n")).await.is_err() {
            return;
        }
        if delayed.contains(&i) && !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }
    let _ = events.send("data: [DONE]\n\n".to_string()).await;
}

/// The prompt's size as the fake reports it: the words of the messages' string contents.
fn prompt_tokens(request: &Value) -> usize {
    request["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .map(|text| text.split_whitespace().count())
                .sum()
        })
        .unwrap_or(0)
}

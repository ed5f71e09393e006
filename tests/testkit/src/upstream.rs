//! Test double: a fake OpenAI-compatible chat completions upstream on loopback. It runs no
//! model; what it answers to `POST /v1/chat/completions` comes from the test, in one of two
//! modes:
//!
//! - [`Upstream::start`]: a script — each request takes the next [`Reply`], then the default
//!   once the script is used up ([`Upstream::push`] adds to it);
//! - [`Upstream::respond`]: a closure that decides the [`Reply`] from the request body.
//!
//! A reply is an answer (streamed as OpenAI streams it — one `chat.completion.chunk` per word,
//! the finish chunk, a usage chunk when the request set `stream_options.include_usage`, then
//! `data: [DONE]` — or one `chat.completion` when the request did not ask for a stream), a tool
//! call, an HTTP error with an optional `Retry-After`, a hang, or a stream cut off after some
//! text. Usage: 5 prompt tokens; one completion token per word (7 for a tool call). Every
//! request body is recorded. The same replies answer Anthropic's `POST /v1/messages`, in
//! Anthropic's shapes ([`crate::upstream_anthropic`]), for `anthropic` providers.

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
    /// Answers `text` (streamed one word, with its trailing space, per chunk, `chunk_delay`
    /// apart) after `delay`, reporting `completion_tokens`.
    Text {
        text: String,
        delay: Duration,
        chunk_delay: Duration,
        completion_tokens: u64,
    },
    /// Answers with one tool call (streamed whole in a single `tool_calls` delta).
    Tool { name: String, arguments: Value },
    /// Answers with several tool calls at once (each streamed whole, in one delta).
    Tools(Vec<(String, Value)>),
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
    /// `text` at once, one completion token per word.
    pub fn text(text: &str) -> Reply {
        Reply::slow_text(text, Duration::ZERO)
    }

    /// `text` after `delay`.
    pub fn slow_text(text: &str, delay: Duration) -> Reply {
        Reply::Text {
            text: text.into(),
            delay,
            chunk_delay: Duration::ZERO,
            completion_tokens: text.split_inclusive(' ').count() as u64,
        }
    }

    /// `text` streamed with `chunk_delay` between its words.
    pub fn paced(text: &str, chunk_delay: Duration) -> Reply {
        Reply::Text {
            text: text.into(),
            delay: Duration::ZERO,
            chunk_delay,
            completion_tokens: text.split_inclusive(' ').count() as u64,
        }
    }

    /// One call of tool `name` with `arguments`.
    pub fn tool(name: &str, arguments: Value) -> Reply {
        Reply::Tool {
            name: name.into(),
            arguments,
        }
    }

    /// An HTTP error without `Retry-After`.
    pub fn status(status: u16) -> Reply {
        Reply::Status {
            status,
            retry_after: None,
        }
    }
}

/// Decides the reply from the request body.
type Respond = Box<dyn Fn(&Value) -> Reply + Send + Sync>;

/// Where replies come from.
enum Source {
    Script {
        queue: Mutex<VecDeque<Reply>>,
        default: Reply,
    },
    Respond(Respond),
}

pub(crate) struct Shared {
    source: Source,
    pub(crate) requests: Mutex<Vec<Value>>,
    /// The `x-api-key` of each Anthropic request, in arrival order.
    pub(crate) anthropic_keys: Mutex<Vec<Option<String>>>,
}

impl Shared {
    pub(crate) fn reply(&self, request: &Value) -> Reply {
        match &self.source {
            Source::Script { queue, default } => queue
                .lock()
                .expect("script")
                .pop_front()
                .unwrap_or_else(|| default.clone()),
            Source::Respond(respond) => respond(request),
        }
    }
}

/// A running upstream double; it serves until the test's runtime shuts down.
pub struct Upstream {
    /// The API root, e.g. `http://127.0.0.1:PORT/v1` (what a provider's `base_url` takes).
    pub base_url: String,
    shared: Arc<Shared>,
}

impl Upstream {
    /// Starts on a free port; `script` is used in order, then `default` for every request.
    pub async fn start(script: Vec<Reply>, default: Reply) -> Upstream {
        Upstream::serve(Source::Script {
            queue: Mutex::new(script.into()),
            default,
        })
        .await
    }

    /// Starts on a free port; `respond` decides each reply from the request body.
    pub async fn respond(respond: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Upstream {
        Upstream::serve(Source::Respond(Box::new(respond))).await
    }

    async fn serve(source: Source) -> Upstream {
        let shared = Arc::new(Shared {
            source,
            requests: Mutex::new(Vec::new()),
            anthropic_keys: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/messages", post(crate::upstream_anthropic::messages))
            .route("/v1/embeddings", post(embeddings))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the upstream double");
        let address = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, app).await.expect("upstream double") });
        Upstream {
            base_url: format!("http://{address}/v1"),
            shared,
        }
    }

    /// The API root for an `anthropic` provider (`/v1/messages` is appended to it).
    pub fn anthropic_base_url(&self) -> String {
        self.base_url.trim_end_matches("/v1").to_string()
    }

    /// The `x-api-key` of each Anthropic request so far.
    pub fn anthropic_keys(&self) -> Vec<Option<String>> {
        self.shared.anthropic_keys.lock().expect("keys").clone()
    }

    /// The request bodies received so far, in arrival order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().expect("requests").clone()
    }

    /// Appends replies to the script (a scripted upstream only).
    pub fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        match &self.shared.source {
            Source::Script { queue, .. } => queue.lock().expect("script").extend(replies),
            Source::Respond(_) => {
                panic!("push: this upstream answers with a closure, not a script")
            }
        }
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

/// The closing usage chunk, when the request asked for it.
fn usage_chunk(request: &Value, usage: &Value) -> Option<String> {
    (request["stream_options"]["include_usage"] == json!(true))
        .then(|| format!("data: {}\n\n", json!({ "choices": [], "usage": usage })))
}

/// A whole (not streamed) `chat.completion`.
fn completion(message: Value, finish: &str, usage: Value) -> Response {
    Json(json!({
        "id": "chatcmpl-double",
        "object": "chat.completion",
        "model": "double-model",
        "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
        "usage": usage,
    }))
    .into_response()
}

/// Dimensions of [`bag_of_words`].
pub const DOUBLE_DIMENSION: usize = 64;

/// The embedding double's vector of `text`: each lowercase word of three or more letters or
/// digits counted in one of 64 buckets (FNV-1a of the word), then scaled to unit length. Texts
/// that share words are near; it is a test double, not a model of meaning.
pub fn bag_of_words(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; DOUBLE_DIMENSION];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
    {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in word.to_lowercase().bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        v[(hash % DOUBLE_DIMENSION as u64) as usize] += 1.0;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

/// `POST /v1/embeddings` of the double: [`bag_of_words`] of each input, as model
/// `double-embed`, a token per word.
async fn embeddings(State(shared): State<Arc<Shared>>, Json(body): Json<Value>) -> Response {
    shared.requests.lock().expect("requests").push(body.clone());
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().unwrap_or_default().to_string())
            .collect(),
        _ => Vec::new(),
    };
    let tokens: usize = inputs.iter().map(|i| i.split_whitespace().count()).sum();
    Json(json!({
        "object": "list",
        "model": "double-embed",
        "data": inputs.iter().enumerate().map(|(index, text)| json!({
            "object": "embedding", "index": index, "embedding": bag_of_words(text),
        })).collect::<Vec<_>>(),
        "usage": { "prompt_tokens": tokens, "total_tokens": tokens },
    }))
    .into_response()
}

async fn chat(State(shared): State<Arc<Shared>>, Json(body): Json<Value>) -> Response {
    shared.requests.lock().expect("requests").push(body.clone());
    let reply = shared.reply(&body);
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
        Reply::Tool { .. } | Reply::Tools(_) => {
            let calls = match reply {
                Reply::Tool { name, arguments } => vec![(name, arguments)],
                Reply::Tools(calls) => calls,
                _ => unreachable!("a tool reply"),
            };
            let calls: Vec<Value> = calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, arguments))| {
                    json!({
                        "id": if i == 0 { "call_double".to_string() } else { format!("call_double_{i}") },
                        "type": "function",
                        "function": { "name": name, "arguments": arguments.to_string() },
                    })
                })
                .collect();
            let usage = json!({ "prompt_tokens": 5, "completion_tokens": 7 });
            if !stream {
                let message = json!({ "role": "assistant", "content": null, "tool_calls": calls });
                return completion(message, "tool_calls", usage);
            }
            let indexed: Vec<Value> = calls
                .into_iter()
                .enumerate()
                .map(|(i, mut call)| {
                    call["index"] = json!(i);
                    call
                })
                .collect();
            let mut events = vec![
                chunk(json!({ "tool_calls": indexed }), None),
                chunk(json!({}), Some("tool_calls")),
            ];
            events.extend(usage_chunk(&body, &usage));
            events.push("data: [DONE]\n\n".to_string());
            sse(Body::from(events.concat()))
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
                let message = json!({ "role": "assistant", "content": text });
                return completion(message, "stop", usage);
            }
            let closing = usage_chunk(&body, &usage);
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, Infallible>>(64);
            // Sends the answer's events; stops early when the client goes away.
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
                if let Some(closing) = closing {
                    let _ = tx.send(Ok(closing)).await;
                }
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

pub(crate) fn sse(body: Body) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(body)
        .expect("response")
}

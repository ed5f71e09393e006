//! The chaos workload's outside world, in the bench process (which is never killed): a model
//! double — an OpenAI-compatible upstream whose answer depends on the last message — and a
//! webhook double that counts every effect by tool and `Idempotency-Key`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};

/// The tools of the chaos agent: (name, idempotent, approval).
pub const TOOLS: [(&str, bool, &str); 4] = [
    ("notify", true, "never"),
    ("pay", false, "never"),
    ("delete", true, "always"),
    ("transfer", false, "always"),
];

/// Whether `tool` is idempotent (retried after a crash with the same key) or not (in doubt).
pub fn idempotent(tool: &str) -> bool {
    TOOLS.iter().any(|(name, idem, _)| *name == tool && *idem)
}

/// How long the webhook takes between receiving a call (the effect) and answering: the window
/// in which a kill leaves a call in doubt.
const EFFECT_LATENCY: Duration = Duration::from_millis(60);

/// Effects the webhook received: (tool, idempotency key) → deliveries.
#[derive(Default)]
pub struct Effects(Mutex<HashMap<(String, String), u32>>);

impl Effects {
    pub fn count(&self, tool: &str, key: &str) -> u32 {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&(tool.to_string(), key.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Every key `tool` was called with, and how often.
    pub fn keys_of(&self, tool: &str) -> Vec<(String, u32)> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter()
            .filter(|((t, _), _)| t == tool)
            .map(|((_, key), count)| (key.clone(), *count))
            .collect()
    }

    fn record(&self, tool: &str, key: &str) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *map.entry((tool.to_string(), key.to_string())).or_default() += 1;
    }
}

/// The model: a tool result gets a short streamed answer; a user message naming a tool
/// (`notify`, `pay`, `delete`, `transfer`) gets a call of it; one saying `long` gets 40 words
/// 20 ms apart; anything else 12 words 10 ms apart.
pub async fn upstream() -> anyhow::Result<String> {
    let app = axum::Router::new().route("/v1/chat/completions", post(chat));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// The webhook double (`POST /{tool}`) and its effects.
pub async fn webhook() -> anyhow::Result<(String, Arc<Effects>)> {
    async fn call(
        State(effects): State<Arc<Effects>>,
        Path(tool): Path<String>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> Json<Value> {
        let key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        effects.record(&tool, &key);
        tokio::time::sleep(EFFECT_LATENCY).await;
        Json(json!({ "done": tool, "arguments": body["arguments"] }))
    }
    let effects = Arc::new(Effects::default());
    let app = axum::Router::new()
        .route("/{tool}", post(call))
        .with_state(effects.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, effects))
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-chaos", "object": "chat.completion.chunk", "created": 0, "model": "chaos",
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
    });
    format!("data: {chunk}\n\n")
}

fn words(n: usize) -> String {
    (1..=n).map(|i| format!("w{i} ")).collect()
}

async fn chat(Json(request): Json<Value>) -> Response {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let text = last["content"].as_str().unwrap_or_default().to_string();
    let stream = request["stream"].as_bool().unwrap_or(false);
    let usage = json!({ "prompt_tokens": 10, "completion_tokens": 5 });
    let tool = (last["role"] == "user")
        .then(|| {
            TOOLS
                .iter()
                .map(|(name, _, _)| *name)
                .find(|name| text.split_whitespace().any(|w| w == *name))
        })
        .flatten();
    if let Some(tool) = tool {
        let call = json!({
            "id": "call_chaos", "type": "function",
            "function": { "name": tool, "arguments": json!({ "n": text }).to_string() },
        });
        if !stream {
            return Json(json!({
                "id": "chatcmpl-chaos", "object": "chat.completion", "model": "chaos",
                "choices": [{ "index": 0, "finish_reason": "tool_calls",
                              "message": { "role": "assistant", "content": null, "tool_calls": [call] } }],
                "usage": usage,
            }))
            .into_response();
        }
        let mut indexed = call;
        indexed["index"] = json!(0);
        let body = [
            chunk(json!({ "tool_calls": [indexed] }), None),
            chunk(json!({}), Some("tool_calls")),
            format!("data: {}\n\n", json!({ "choices": [], "usage": usage })),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat();
        return sse(Body::from(body));
    }
    let (answer, pace) = if last["role"] == "tool" {
        ("Done with it.".to_string(), Duration::from_millis(5))
    } else if text.split_whitespace().any(|w| w == "long") {
        (words(40), Duration::from_millis(20))
    } else {
        (words(12), Duration::from_millis(10))
    };
    if !stream {
        return Json(json!({
            "id": "chatcmpl-chaos", "object": "chat.completion", "model": "chaos",
            "choices": [{ "index": 0, "finish_reason": "stop",
                          "message": { "role": "assistant", "content": answer } }],
            "usage": usage,
        }))
        .into_response();
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, Infallible>>(64);
    tokio::spawn(async move {
        for word in answer.split_inclusive(' ') {
            if tx
                .send(Ok(chunk(json!({ "content": word }), None)))
                .await
                .is_err()
            {
                return;
            }
            tokio::time::sleep(pace).await;
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

fn sse(body: Body) -> Response {
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

/// The `stead.toml` of the chaos server: the model double behind route `default`, and agent
/// `chaos` with the four webhook tools at `webhook`.
pub fn config(upstream: &str, webhook: &str) -> String {
    let mut config = format!(
        "[[providers]]\nname = \"double\"\nkind = \"openai\"\nbase_url = \"{upstream}\"\n\n\
         [[routes]]\nname = \"default\"\ntargets = [{{ provider = \"double\", model = \"chaos\" }}]\n\n\
         [[agents]]\nname = \"chaos\"\nroute = \"default\"\nsystem_prompt = \"You are chaos.\"\nmax_steps = 4\n"
    );
    for (name, idempotent, approval) in TOOLS {
        config.push_str(&format!(
            "\n[[agents.tools]]\nname = \"{name}\"\nkind = \"webhook\"\nurl = \"{webhook}/{name}\"\n\
             description = \"{name} something\"\n\
             parameters = {{ type = \"object\", properties = {{ n = {{ type = \"string\" }} }}, required = [\"n\"] }}\n\
             approval = \"{approval}\"\nidempotent = {idempotent}\n"
        ));
    }
    config
}

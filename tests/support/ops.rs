//! The `ops` scenario shared by the end-to-end tests: a fake OpenAI-compatible upstream (test
//! double) with a fixed script, a webhook double that counts deliveries by `Idempotency-Key`,
//! and the `stead.toml` that wires them to an agent with an approval-gated webhook tool.
//!
//! Include with `#[path = "support/ops.rs"] mod ops;` next to `fake_openai`.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::fake_openai::{FakeOpenAi, Scripted};

/// The long answer: 40 words, 25 ms apart (a stream of about a second).
/// A huge answer for slow-client tests: 6,000 chunks of 8 KiB (48 MiB of deltas, more than the
/// kernel's socket buffers and a connection's 1,024-frame queue hold), about 1 ms apart — a
/// pace a reading client keeps up with.
pub fn flood_answer() -> String {
    let word = "x".repeat(8191);
    vec![word; 6_000].join(" ")
}

pub fn long_answer() -> String {
    (1..=40)
        .map(|i| format!("word{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The script: a message mentioning "delete" asks for the gated webhook; a tool result gets
/// "Done."; anything else gets the long streamed answer.
pub async fn upstream() -> FakeOpenAi {
    FakeOpenAi::start(Arc::new(|request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        if last["role"] == "tool" {
            return Scripted::Text {
                text: "Done.".into(),
                chunk_delay: Duration::from_millis(1),
            };
        }
        let text = last["content"].as_str().unwrap_or_default();
        if text.contains("flood") {
            return Scripted::Text {
                text: flood_answer(),
                chunk_delay: Duration::from_millis(1),
            };
        }
        if text.contains("delete") {
            return Scripted::ToolCall {
                name: "delete_records".into(),
                arguments: json!({ "table": "users" }),
            };
        }
        Scripted::Text {
            text: long_answer(),
            chunk_delay: Duration::from_millis(25),
        }
    }))
    .await
}

#[derive(Clone, Default)]
pub struct Webhook {
    pub keys: Arc<Mutex<Vec<String>>>,
}

pub async fn webhook() -> (String, Webhook) {
    async fn handle(
        State(w): State<Webhook>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> Json<Value> {
        let key = headers["idempotency-key"].to_str().unwrap().to_string();
        w.keys.lock().unwrap().push(key);
        Json(json!({ "deleted": body["arguments"]["table"] }))
    }
    let w = Webhook::default();
    let app = Router::new()
        .route("/delete", post(handle))
        .with_state(w.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/delete", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, w)
}

pub fn config(upstream: &str, webhook: &str, extra: &str) -> String {
    format!(
        r#"
{extra}

[[providers]]
name = "fake"
kind = "openai"
base_url = "{upstream}"

[[routes]]
name = "default"
targets = [{{ provider = "fake", model = "scripted" }}]

[[routes]]
name = "other"
targets = [{{ provider = "fake", model = "scripted-2" }}]

[[agents]]
name = "ops"
route = "default"
system_prompt = "You are ops."
max_steps = 4

[[agents.tools]]
name = "delete_records"
kind = "webhook"
url = "{webhook}"
description = "Delete records from a table"
parameters = {{ type = "object", properties = {{ table = {{ type = "string" }} }}, required = ["table"] }}
approval = "always"
idempotent = true
"#
    )
}

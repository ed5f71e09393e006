//! The `ops` scenario of the end-to-end tests: an upstream double whose answer depends on the
//! message, a webhook double behind an approval-gated `delete_records` tool, and the
//! `stead.toml` that wires them to the `ops` agent.

use std::time::Duration;

use serde_json::{json, Value};

use crate::upstream::{Reply, Upstream};
use crate::webhook::Webhook;

/// The long answer: 40 words, 25 ms apart (a stream of about a second).
pub fn long_answer() -> String {
    (1..=40)
        .map(|i| format!("word{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A huge answer for slow-client tests: 6,000 chunks of 8 KiB (48 MiB of deltas, more than the
/// kernel's socket buffers and a connection's 1,024-frame queue hold), about 1 ms apart — a
/// pace a reading client keeps up with.
pub fn flood_answer() -> String {
    let word = "x".repeat(8191);
    vec![word; 6_000].join(" ")
}

/// The upstream: a message mentioning "delete" asks for the gated webhook, one mentioning
/// "flood" gets [`flood_answer`]; a tool result gets "Done."; anything else gets
/// [`long_answer`].
pub async fn upstream() -> Upstream {
    Upstream::respond(|request: &Value| {
        let messages = request["messages"].as_array().expect("messages");
        let last = messages.last().expect("a message");
        if last["role"] == "tool" {
            return Reply::paced("Done.", Duration::from_millis(1));
        }
        let text = last["content"].as_str().unwrap_or_default();
        if text.contains("flood") {
            return Reply::paced(&flood_answer(), Duration::from_millis(1));
        }
        if text.contains("delete") {
            return Reply::tool("delete_records", json!({ "table": "users" }));
        }
        Reply::paced(&long_answer(), Duration::from_millis(25))
    })
    .await
}

/// The webhook double and the URL of its `/delete` endpoint.
pub async fn webhook() -> (String, Webhook) {
    let hook = Webhook::start().await;
    (hook.url("/delete"), hook)
}

/// `stead.toml`: `extra` first, then the provider `fake` at `upstream`, routes `default`
/// (model `scripted`) and `other` (`scripted-2`), and the `ops` agent whose `delete_records`
/// tool posts to `webhook` and always needs approval.
pub fn config(upstream: &str, webhook: &str, extra: &str) -> String {
    format!(
        r#"
{extra}

[[providers]]
name = "fake"
kind = "openai"
base_url = "{upstream}"
# The flood test streams a 48 MiB answer (over the default 16 MiB limit of one answer).
max_answer_mib = 64

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

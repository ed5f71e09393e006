//! A strict budget covers a delegation tree (`stead serve`, an upstream double answering per
//! agent): a child's model calls are charged to its parent's principal, so when the budget runs
//! out inside the child, the child's model call fails with `budget_exceeded`, the parent's
//! `agent` call fails with that reason, the parent's next model call is refused by the same
//! budget, and the tree stops with the reason in both journals — nothing else reaches the
//! upstream.

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

/// The lead delegates, the researcher asks the clock and then answers.
fn reply(request: &Value) -> Reply {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let system = messages[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let answered = messages.last().is_some_and(|m| m["role"] == "tool");
    match (system.as_str(), answered) {
        ("You research.", false) => Reply::tool("clock", json!({})),
        ("You research.", true) => Reply::text("Rayleigh scattering."),
        (_, false) => Reply::tool("research", json!({"task": "Why is the sky blue?"})),
        (_, true) => Reply::text("Done."),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_exhaustion_in_a_child_stops_the_tree_with_the_reason() {
    let up = Upstream::respond(reply).await;
    // Each call reserves 10 output tokens at 1000 USD per million (0.01) and costs 7 tokens
    // (0.007) when it answers: two calls fit in 0.02, the third does not.
    let config = up.config(
        "metered",
        r#"model = "priced", max_tokens = 10"#,
        r#"[gateway.limits]
budget_usd = 0.02
budget_window_secs = 3600

[gateway.prices.priced]
input = 0.0
output = 1000.0

[[agents]]
name = "lead"
route = "metered"
system_prompt = "You coordinate."

[[agents.tools]]
name = "research"
kind = "agent"
agent = "researcher"

[[agents]]
name = "researcher"
route = "metered"
system_prompt = "You research."

[[agents.tools]]
name = "clock"
kind = "clock"
"#,
    );
    let server = Stead::start(&config, None);
    let (lead, _) = server.create("lead").await;
    let (status, body) = server.say(&lead, "Why is the sky blue?").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "idle", "{body}");

    let journal = server.journal(&lead).await;
    let failed_call = journal
        .iter()
        .find(|e| e["kind"] == "tool_call_failed")
        .unwrap_or_else(|| panic!("the agent call fails: {journal:?}"));
    let error = failed_call["payload"]["error"].as_str().unwrap();
    assert!(
        error.contains("model call failed") && error.contains("budget"),
        "{error}"
    );
    let refused = journal
        .iter()
        .rev()
        .find(|e| e["kind"] == "model_call_failed")
        .unwrap();
    assert!(
        refused["payload"]["error"]
            .as_str()
            .unwrap()
            .contains("budget"),
        "{refused}"
    );
    let end = journal
        .iter()
        .rev()
        .find(|e| e["kind"] == "turn_finished")
        .unwrap();
    assert_eq!(end["payload"]["reason"], "model_failed");

    let (_, children) = server
        .call("GET", &format!("/v1/sessions/{lead}/children"), None)
        .await;
    let child = children["sessions"][0]["id"].as_str().unwrap().to_string();
    let child_journal = server.journal(&child).await;
    let child_failed = child_journal
        .iter()
        .find(|e| e["kind"] == "model_call_failed")
        .unwrap();
    assert!(
        child_failed["payload"]["error"]
            .as_str()
            .unwrap()
            .contains("budget"),
        "{child_failed}"
    );
    // The lead's first call and the researcher's first: nothing after the budget ran out.
    assert_eq!(up.requests().len(), 2);
}

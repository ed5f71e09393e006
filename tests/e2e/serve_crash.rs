//! Crash recovery through `stead serve` itself, on both backends: the server process is killed
//! with SIGKILL and started again on the same data (docs/architecture.md, invariant 3). The
//! model is the fake upstream test double; tool effects are counted at a webhook double by
//! `Idempotency-Key`.

use std::collections::HashMap;

use serde_json::{json, Value};
use stead_persistence::scratch::ScratchDatabase;
use stead_testkit::client::Api;
use stead_testkit::stead::{streamed_text, Stead};
use stead_testkit::{db, ops};

/// A scratch PostgreSQL database (`None` for SQLite in the data directory).
async fn database(postgres: bool) -> Option<ScratchDatabase> {
    if !postgres {
        return None;
    }
    Some(db::scratch_postgres("stead_crash").await)
}

/// Seqs are 1..=n, each model call has one start and at most one end, each tool call one
/// outcome.
fn assert_clean(journal: &[Value]) {
    let mut ends: HashMap<String, usize> = HashMap::new();
    for (i, event) in journal.iter().enumerate() {
        assert_eq!(event["seq"], i as i64 + 1, "gapless");
        let kind = event["kind"].as_str().unwrap();
        let call = event["payload"]["call_id"].as_str().unwrap_or_default();
        if matches!(
            kind,
            "model_call_started"
                | "model_call_finished"
                | "model_call_failed"
                | "tool_call_started"
                | "tool_call_finished"
                | "tool_call_failed"
        ) {
            *ends.entry(format!("{kind}:{call}")).or_default() += 1;
        }
    }
    for (key, count) in ends {
        assert_eq!(count, 1, "{key} journaled {count} times");
    }
}

async fn parked_then_killed(postgres: bool) {
    let scratch = database(postgres).await;
    let url = scratch.as_ref().map(|s| s.url().to_string());
    let fake = ops::upstream().await;
    let (hook_url, hook) = ops::webhook().await;
    let config = ops::config(&fake.base_url, &hook_url, "");
    let server = Stead::start(&config, url.as_deref());
    let (id, _) = server.create("ops").await;
    let (_, parked) = server.say(&id, "delete the users table").await;
    assert_eq!(parked["status"], "awaiting_approval", "{parked}");
    let call_id = parked["pending_approvals"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_string();

    let data = server.kill();
    let server = Stead::start_in(data, &config, url.as_deref());
    let session = server.wait_for_status(&id, "awaiting_approval").await;
    assert_eq!(
        session["pending_approvals"][0]["call_id"], call_id,
        "still parked"
    );
    let (status, body) = server
        .call(
            "POST",
            &format!("/v1/sessions/{id}/approvals/{call_id}"),
            Some(json!({ "approved": true })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    server.wait_for_status(&id, "idle").await;
    assert_eq!(
        hook.keys(),
        vec![format!("{id}:{call_id}")],
        "the webhook ran exactly once"
    );
    let journal = server.journal(&id).await;
    assert_clean(&journal);
    assert_eq!(journal.last().unwrap()["kind"], "turn_finished");
    drop(server);
    if let Some(scratch) = scratch {
        scratch.drop_database().await.unwrap();
    }
}

async fn killed_mid_model_call(postgres: bool) {
    let scratch = database(postgres).await;
    let url = scratch.as_ref().map(|s| s.url().to_string());
    let fake = ops::upstream().await;
    let (hook_url, _) = ops::webhook().await;
    let config = ops::config(&fake.base_url, &hook_url, "");
    let server = Stead::start(&config, url.as_deref());
    let (id, token) = server.create("ops").await;
    let mut ws = server.ws(&id, &token, "").await;
    ws.next().await.unwrap();
    ws.send(json!({ "type": "user_message", "text": "tell me a story" }))
        .await;
    let mut frames = Vec::new();
    while streamed_text(&frames).is_empty() {
        frames.push(ws.next().await.unwrap());
    }
    let data = server.kill();
    let before = fake.requests().len();
    assert_eq!(before, 1);

    // The restarted server resumes the turn by itself: one more model call, no duplicates.
    let server = Stead::start_in(data, &config, url.as_deref());
    server.wait_for_status(&id, "idle").await;
    assert_eq!(fake.requests().len(), 2, "exactly one more model call");
    let journal = server.journal(&id).await;
    assert_clean(&journal);
    let kinds: Vec<&str> = journal
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "session_created",
            "user_message",
            "model_call_started",
            "model_call_finished",
            "assistant_message",
            "turn_finished"
        ]
    );
    assert_eq!(journal[3]["payload"]["text"], ops::long_answer());
    drop(server);
    if let Some(scratch) = scratch {
        scratch.drop_database().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sigkill_while_parked_then_approve_runs_the_tool_once() {
    parked_then_killed(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sigkill_while_parked_then_approve_runs_the_tool_once() {
    parked_then_killed(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sigkill_mid_model_call_issues_it_once_more() {
    killed_mid_model_call(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sigkill_mid_model_call_issues_it_once_more() {
    killed_mid_model_call(true).await;
}

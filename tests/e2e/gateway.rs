//! The front door end to end: the real `stead serve` process, real WebSocket clients
//! (`tokio-tungstenite`) and REST. The model is a test double — a fake OpenAI-compatible
//! upstream on loopback whose answers are scripted (`stead_testkit::upstream`, in the `ops`
//! scenario of `stead_testkit::ops`) — so turns, tool calls and stream timing are
//! deterministic; `tests/local_model/gateway.rs` runs a chat on the real local model. Tool effects land at a webhook double that counts them by
//! `Idempotency-Key`.

use std::time::Duration;

use serde_json::json;
use stead_testkit::client::Api;
use stead_testkit::ops::{self, long_answer};
use stead_testkit::stead::{events, streamed_text, Stead};
use stead_testkit::upstream::Upstream;
use stead_testkit::webhook::Webhook;

async fn start(extra: &str) -> (Stead, Upstream, Webhook) {
    let fake = ops::upstream().await;
    let (hook_url, hook) = ops::webhook().await;
    let server = Stead::start(&ops::config(&fake.base_url, &hook_url, extra), None);
    (server, fake, hook)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_see_the_same_stream_and_events() {
    let (server, fake, _) = start("").await;
    let (id, token) = server.create("ops").await;
    let mut a = server.ws(&id, &token, "").await;
    let mut b = server.ws(&id, &token, "").await;
    let hello = a.next().await.unwrap();
    assert_eq!(
        hello,
        json!({ "type": "hello", "session_id": id, "last_seq": 1, "status": "idle" })
    );
    assert_eq!(b.next().await.unwrap(), hello);
    a.send(json!({ "type": "user_message", "text": "tell me a story", "client_id": "c1" }))
        .await;
    let frames_a = a.until_event("turn_finished").await;
    let frames_b = b.until_event("turn_finished").await;
    assert_eq!(streamed_text(&frames_a), long_answer());
    assert_eq!(streamed_text(&frames_b), long_answer());
    assert_eq!(
        events(&frames_a),
        events(&frames_b),
        "identical event sequences"
    );
    // The frames are the journal, by value.
    let journal = server.journal(&id).await;
    assert_eq!(events(&frames_a), journal[1..].to_vec());
    let user = &journal[1];
    assert_eq!(user["kind"], "user_message");
    assert_eq!(user["payload"]["client_id"], "c1", "client_id echoed");
    // A repeated client_id is not applied twice.
    a.send(json!({ "type": "user_message", "text": "again", "client_id": "c1" }))
        .await;
    let error = a.until_error().await;
    assert_eq!(error["code"], "duplicate_client_id");
    assert_eq!(server.journal(&id).await, journal);
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reconnects_mid_stream_resumes_without_gaps_or_duplicates() {
    let (server, fake, _) = start("").await;
    let (id, token) = server.create("ops").await;
    let mut steady = server.ws(&id, &token, "").await;
    steady.next().await.unwrap();
    let mut flaky = server.ws(&id, &token, "").await;
    flaky.next().await.unwrap();
    flaky
        .send(json!({ "type": "user_message", "text": "tell me a story" }))
        .await;
    // The flaky client reads a few frames mid-stream, then drops its connection.
    let mut before = Vec::new();
    while streamed_text(&before).split(' ').count() < 8 {
        before.push(flaky.next().await.unwrap());
    }
    let last_seq = events(&before)
        .last()
        .map_or(1, |e| e["seq"].as_i64().unwrap());
    drop(flaky);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Reconnect and resume after the last event it saw.
    let mut back = server.ws(&id, &token, "").await;
    let hello = back.next().await.unwrap();
    assert_eq!(hello["type"], "hello");
    back.send(json!({ "type": "resume", "after_seq": last_seq }))
        .await;
    let after = back.until_event("turn_finished").await;
    let full = steady.until_event("turn_finished").await;

    // Events: what it saw before plus what it got after = the uninterrupted client's.
    let mut seen = events(&before);
    seen.extend(events(&after));
    assert_eq!(seen, events(&full));
    // Text: the resumed stream restarts the in-flight call from its beginning, so the text
    // after the resume is the whole answer, exactly once.
    assert_eq!(streamed_text(&after), long_answer());
    assert_eq!(streamed_text(&full), long_answer());
    let model_calls = server
        .journal(&id)
        .await
        .iter()
        .filter(|e| e["kind"] == "model_call_started")
        .count();
    assert_eq!(model_calls, 1, "no extra model call");
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_decided_over_rest_while_a_websocket_client_watches() {
    let (server, _fake, hook) = start("").await;
    let (id, token) = server.create("ops").await;
    let mut watcher = server.ws(&id, &token, "").await;
    watcher.next().await.unwrap();
    let (status, body) = server.say(&id, "please delete the users table").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "awaiting_approval");
    let pending = body["pending_approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1);
    let call_id = pending[0]["call_id"].as_str().unwrap().to_string();
    assert_eq!(pending[0]["tool"], "delete_records");
    assert_eq!(pending[0]["arguments"], json!({ "table": "users" }));
    let requested = watcher.until_event("approval_requested").await;
    assert_eq!(
        events(&requested).last().unwrap()["payload"]["call_id"],
        call_id
    );

    // The inbox across sessions shows it.
    let (_, inbox) = server
        .call("GET", "/v1/approvals?status=pending", None)
        .await;
    let listed = inbox["approvals"].as_array().unwrap();
    assert!(listed
        .iter()
        .any(|a| a["session_id"] == id && a["call_id"] == call_id));
    assert!(hook.keys().is_empty(), "nothing ran before approval");

    let (status, decided) = server
        .call(
            "POST",
            &format!("/v1/sessions/{id}/approvals/{call_id}"),
            Some(json!({ "approved": true, "reason": "ok" })),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    let rest = watcher.until_event("turn_finished").await;
    let kinds: Vec<String> = events(&rest)
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        [
            "approval_decided",
            "tool_call_started",
            "tool_call_finished",
            "model_call_started",
            "model_call_finished",
            "assistant_message",
            "turn_finished"
        ]
    );
    assert_eq!(events(&rest)[0]["payload"]["decided_by"], "local");
    assert_eq!(
        hook.keys(),
        vec![format!("{id}:{call_id}")],
        "the webhook ran once with the call's idempotency key"
    );
    // A second decision is a conflict and changes nothing.
    let journal = server.journal(&id).await;
    let (status, body) = server
        .call(
            "POST",
            &format!("/v1/sessions/{id}/approvals/{call_id}"),
            Some(json!({ "approved": false })),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("already_decided"))
    );
    assert_eq!(server.journal(&id).await, journal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_stream_and_ends_the_turn() {
    let (server, _fake, _) = start("").await;
    let (id, token) = server.create("ops").await;
    let mut client = server.ws(&id, &token, "").await;
    client.next().await.unwrap();
    client
        .send(json!({ "type": "user_message", "text": "tell me a story" }))
        .await;
    let mut frames = Vec::new();
    while streamed_text(&frames).is_empty() {
        frames.push(client.next().await.unwrap());
    }
    client.send(json!({ "type": "cancel" })).await;
    let rest = client.until_event("turn_cancelled").await;
    assert!(streamed_text(&rest).len() < long_answer().len());
    let (_, session) = server
        .call("GET", &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(session["status"], "idle");
    let journal = server.journal(&id).await;
    assert!(journal.iter().all(|e| e["kind"] != "model_call_finished"));
    // Nothing to cancel now: a 409 over REST, an error frame over the socket.
    let (status, body) = server
        .call("POST", &format!("/v1/sessions/{id}/cancel"), None)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("nothing_to_cancel"))
    );
    client.send(json!({ "type": "cancel" })).await;
    assert_eq!(client.until_error().await["code"], "nothing_to_cancel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_at_any_seq_and_forks_that_do_not_rerun_the_past() {
    let (server, fake, hook) = start("").await;
    let (id, _) = server.create("ops").await;
    let (_, parked) = server.say(&id, "delete the users table").await;
    let call_id = parked["pending_approvals"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    server
        .call(
            "POST",
            &format!("/v1/sessions/{id}/approvals/{call_id}"),
            Some(json!({ "approved": true })),
        )
        .await;
    // Let that turn finish before the next message (a message during a turn would be queued
    // and start right at the turn's end).
    server.wait_for_status(&id, "idle").await;
    let (_, done) = server.say(&id, "hello").await;
    assert_eq!(done["status"], "idle");
    let journal = server.journal(&id).await;
    let parked_at = journal
        .iter()
        .find(|e| e["kind"] == "approval_requested")
        .unwrap()["seq"]
        .as_i64()
        .unwrap();

    // The state at the seq where it parked.
    let (status, state) = server
        .call(
            "GET",
            &format!("/v1/sessions/{id}/state?at={parked_at}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{state}");
    assert_eq!(state["seq"], parked_at);
    assert_eq!(state["status"], "awaiting_approval");
    let (_, now) = server
        .call("GET", &format!("/v1/sessions/{id}/state"), None)
        .await;
    assert_eq!(now["status"], "idle");
    assert_eq!(now["seq"], journal.len());
    let (status, body) = server
        .call("GET", &format!("/v1/sessions/{id}/state?at=999"), None)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("seq_out_of_range"))
    );

    // Fork after the tool ran and the model answered: nothing earlier runs again; the fork
    // continues on another route with another system prompt.
    let finished_at = journal
        .iter()
        .find(|e| e["kind"] == "turn_finished")
        .unwrap()["seq"]
        .as_i64()
        .unwrap();
    let upstream_calls = fake.requests().len();
    let (status, forked) = server
        .call(
            "POST",
            &format!("/v1/sessions/{id}/fork"),
            Some(json!({ "at": finished_at, "overrides": { "route": "other", "system_prompt": "Be brief." } })),
        )
        .await;
    assert_eq!(status, 201, "{forked}");
    let fork_id = forked["id"].as_str().unwrap().to_string();
    assert_eq!(
        forked["forked_from"],
        json!({ "session_id": id, "at": finished_at })
    );
    let fork_journal = server.journal(&fork_id).await;
    assert_eq!(
        fork_journal.len() as i64,
        finished_at + 1,
        "{fork_journal:#?}"
    );
    for (copy, original) in fork_journal[..finished_at as usize].iter().zip(&journal) {
        assert_eq!(copy, original, "the fork's journal is a copy up to `at`");
    }
    assert_eq!(fork_journal.last().unwrap()["kind"], "session_forked");
    assert_eq!(
        fake.requests().len(),
        upstream_calls,
        "no model call was re-run"
    );
    assert_eq!(hook.keys().len(), 1, "no tool was re-run");

    let (_, answer) = server.say(&fork_id, "and then?").await;
    assert_eq!(answer["status"], "idle");
    let last = fake.requests().last().unwrap().clone();
    assert_eq!(last["model"], "scripted-2", "the fork's route");
    assert_eq!(last["messages"][0]["content"], "Be brief.");
    // The source is untouched.
    assert_eq!(server.journal(&id).await, journal);
}

/// The value of one Prometheus sample line (`name{labels} value`).
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{series}` in\n{metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_sessions_clients_events_and_requests() {
    let (server, _fake, _) = start("").await;
    let (id, token) = server.create("ops").await;
    let mut ws = server.ws(&id, &token, "").await;
    ws.next().await.unwrap();
    let (_, done) = server.say(&id, "hi").await;
    assert_eq!(done["status"], "idle");
    let metrics = server.metrics().await;
    assert_eq!(sample(&metrics, "stead_sessions{status=\"idle\"}"), 1.0);
    assert_eq!(sample(&metrics, "stead_sessions{status=\"running\"}"), 0.0);
    assert_eq!(sample(&metrics, "stead_websocket_clients"), 1.0);
    assert_eq!(sample(&metrics, "stead_session_actors_live"), 1.0);
    let journal = server.journal(&id).await;
    assert_eq!(
        sample(&metrics, "stead_journal_events_appended_total"),
        journal.len() as f64
    );
    assert_eq!(
        sample(
            &metrics,
            "stead_http_requests_total{method=\"POST\",route=\"/v1/sessions\",status=\"201\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(
            &metrics,
            "stead_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/sessions/{id}/messages\"}"
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_websockets_with_a_going_away_frame_and_exits_cleanly() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let (mut server, _fake, _) = start("").await;
    let (id, token) = server.create("ops").await;
    let mut ws = server.ws(&id, &token, "").await;
    ws.next().await.unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let status = server.signal(libc::SIGTERM);
        (server, status)
    });
    let close = loop {
        match tokio::time::timeout(Duration::from_secs(30), ws.stream.next()).await {
            Ok(Some(Ok(Message::Close(frame)))) => break frame,
            Ok(Some(Ok(_))) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    let close = close.expect("a close frame with a code");
    assert_eq!(u16::from(close.code), 1001, "going away");
    let (_server, status) = status.await.unwrap();
    assert!(status.success(), "exit {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_is_dropped_and_stalls_no_one() {
    let (server, _fake, _) = start("").await;
    let (id, token) = server.create("ops").await;
    let mut reader = server.ws(&id, &token, "").await;
    reader.next().await.unwrap();
    // This one reads its hello and then nothing at all.
    let mut stalled = server.ws(&id, &token, "").await;
    stalled.next().await.unwrap();
    let (status, _) = server
        .call(
            "POST",
            &format!("/v1/sessions/{id}/messages"),
            Some(json!({ "text": "flood" })),
        )
        .await;
    assert_eq!(status, 202);
    // The reading client gets the whole stream and the end of the turn. (The 48 MiB answer is
    // over the journal's event limit, so the call ends as `model_call_failed` rather than
    // wedging the turn.)
    let frames = reader.until_event("turn_finished").await;
    assert_eq!(streamed_text(&frames), ops::flood_answer());
    let failed = events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "model_call_failed")
        .expect("the oversized answer fails its call");
    assert!(failed["payload"]["error"]
        .as_str()
        .unwrap()
        .contains("could not be journaled"));
    // The stalled client was dropped: reading now, it gets what its buffers held and then the
    // end of the connection (`error too_slow` and close 1008 when the server saw its queue
    // overflow; a plain close when a send to it timed out first) — never the whole answer.
    let mut got = Vec::new();
    let drained = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(frame) = stalled.next().await {
            got.push(frame);
        }
    })
    .await;
    assert!(drained.is_ok(), "the stalled client was never disconnected");
    assert!(streamed_text(&got).len() < ops::flood_answer().len());
    if let Some(error) = got.iter().find(|f| f["type"] == "error") {
        assert_eq!(error["code"], "too_slow");
    }
    let metrics = server.metrics().await;
    assert_eq!(sample(&metrics, "stead_websocket_clients"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_the_routes_in_openai_format() {
    let (server, _fake, _) = start("").await;
    let (status, body) = server.call("GET", "/v1/models", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({ "object": "list", "data": [
            { "id": "default", "object": "model", "created": 0, "owned_by": "stead" },
            // The built-in embedding route, added because the file brings no embeddings.
            { "id": "embed", "object": "model", "created": 0, "owned_by": "stead" },
            { "id": "other", "object": "model", "created": 0, "owned_by": "stead" },
        ]})
    );
    // A session token is not an operator credential.
    let (_, token) = server.create("ops").await;
    let (status, body) = server
        .call_as("GET", "/v1/models", None, Some(&token))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden"))
    );
}

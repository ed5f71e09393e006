//! Sub-agents through the HTTP edge: a coordinator's one answer delegates to two child agents
//! that run at once; the writer child parks on an approval that the parent's WebSocket hears
//! about as `tool_progress` and the parent's REST view lists; the person approves it with the
//! parent's session token (which reaches its descendants, and no other session); both replies
//! come back and the coordinator finishes. The inbox names the parent of a child's approval.

use std::sync::Arc;

use serde_json::json;
use stead_testkit::app::App;
use stead_testkit::client::Api;
use stead_testkit::delegation::{self, DRAFT, FINDINGS};

async fn app() -> App {
    App::start(delegation::agents(), Arc::new(delegation::model()), &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_approval_is_decided_from_the_parents_view() {
    let app = app().await;
    let (lead, token) = app.create("lead").await;
    let (other, other_token) = app.create("researcher").await;
    let mut ws = app.ws(&lead, &token, "").await;
    ws.send(json!({"type": "user_message", "text": "Explain the sky, and write a line."}))
        .await;

    // The parent hears its writer child park: a `tool_progress` of the `write` call.
    let mut progress = Vec::new();
    let parked = loop {
        let frame = ws.next().await.expect("frames until the child parks");
        if frame["type"] == "tool_progress" {
            progress.push(frame.clone());
            if frame["child_status"] == "awaiting_approval" {
                break frame;
            }
        }
    };
    assert_eq!(parked["text"], "awaiting approval of clock", "{parked}");
    let writer = parked["child_session_id"].as_str().unwrap().to_string();
    assert_ne!(writer, lead);

    // Both calls started in the decision that read the answer, before either had a result:
    // the children run at once.
    let journal = app.journal(&lead).await;
    let kinds: Vec<&str> = journal.iter().filter_map(|e| e["kind"].as_str()).collect();
    let answered = kinds
        .iter()
        .position(|k| *k == "model_call_finished")
        .unwrap();
    assert_eq!(
        kinds[answered..answered + 5],
        [
            "model_call_finished",
            "tool_call_requested",
            "tool_call_requested",
            "tool_call_started",
            "tool_call_started"
        ],
        "{kinds:?}"
    );
    let started = kinds
        .iter()
        .filter(|k| **k == "child_session_started")
        .count();
    assert_eq!(started, 2, "{kinds:?}");
    let (status, children) = app
        .call_as(
            "GET",
            &format!("/v1/sessions/{lead}/children"),
            None,
            Some(&token),
        )
        .await;
    assert_eq!(status, 200, "{children}");
    assert_eq!(children["sessions"].as_array().unwrap().len(), 2);

    // The parent's view lists the child's approval, naming the child and the parent.
    let (status, pending) = app
        .call_as(
            "GET",
            &format!("/v1/sessions/{lead}/approvals"),
            None,
            Some(&token),
        )
        .await;
    assert_eq!(status, 200, "{pending}");
    let approvals = pending["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{pending}");
    let approval = &approvals[0];
    assert_eq!(approval["session_id"], json!(writer));
    assert_eq!(approval["parent_session_id"], json!(lead));
    assert_eq!(approval["agent"], "writer");
    assert_eq!(approval["tool"], "clock");
    // So does the operators' inbox.
    let (_, inbox) = app.call("GET", "/v1/approvals", None).await;
    assert_eq!(inbox["approvals"], pending["approvals"]);

    // Another session's token reaches neither the child nor its approvals.
    let call = approval["call_id"].as_str().unwrap();
    let decide = format!("/v1/sessions/{writer}/approvals/{call}");
    for (method, path, body) in [
        ("GET", format!("/v1/sessions/{writer}"), None),
        ("GET", format!("/v1/sessions/{lead}/approvals"), None),
        ("POST", decide.clone(), Some(json!({"approved": true}))),
    ] {
        let (status, body) = app.call_as(method, &path, body, Some(&other_token)).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], "forbidden");
    }
    let (status, _) = app
        .call_as(
            "GET",
            &format!("/v1/sessions/{lead}"),
            None,
            Some(&other_token),
        )
        .await;
    assert_eq!(status, 403);
    let _ = other;

    // The person on the parent's page approves the child's call with the parent's token.
    let (status, decided) = app
        .call_as(
            "POST",
            &decide,
            Some(json!({"approved": true})),
            Some(&token),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    let (_, child) = app
        .call_as(
            "GET",
            &format!("/v1/sessions/{writer}/events"),
            None,
            Some(&token),
        )
        .await;
    let decided_event = child["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "approval_decided")
        .unwrap();
    assert_eq!(
        decided_event["payload"]["decided_by"],
        json!(format!("session_token:{lead}"))
    );

    // Both replies come back and the coordinator finishes with them.
    let frames = ws.until_event("turn_finished").await;
    let answer = stead_testkit::client::events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap();
    assert_eq!(
        answer["payload"]["text"],
        delegation::lead_answer(FINDINGS, DRAFT)
    );
    let journal = app.journal(&lead).await;
    let finished = journal
        .iter()
        .filter(|e| e["kind"] == "tool_call_finished")
        .count();
    assert_eq!(finished, 2, "each child's reply is delivered once");
    let (_, after) = app
        .call_as(
            "GET",
            &format!("/v1/sessions/{lead}/approvals"),
            None,
            Some(&token),
        )
        .await;
    assert_eq!(after, json!({"approvals": []}));
}

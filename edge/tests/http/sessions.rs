//! A session's life through the handlers: create, list, message (waiting for the turn), the
//! journal page, state at a seq, fork, close; a WebSocket that resumes after a seq; and the
//! operational endpoints. Payloads are compared by value.

use std::sync::Arc;

use serde_json::{json, Value};
use stead_testkit::app::{ops_agent, App};
use stead_testkit::client::Api;
use stead_testkit::model::ScriptedModel;

async fn app() -> App {
    let model = ScriptedModel::respond(|request| {
        let asked = request.transcript.len();
        (format!("Answer {asked}."), vec![])
    });
    App::start(vec![ops_agent()], Arc::new(model), &[]).await
}

fn kinds(journal: &[Value]) -> Vec<&str> {
    journal.iter().filter_map(|e| e["kind"].as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_over_rest() {
    let app = app().await;
    let (status, created) = app
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({ "agent": "ops", "metadata": { "team": "ops" } })),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(
        (&created["agent"], &created["status"], &created["last_seq"]),
        (&json!("ops"), &json!("idle"), &json!(1))
    );
    assert_eq!(created["metadata"], json!({ "team": "ops" }));

    let (status, answered) = app.say(&id, "What is the capital of France?").await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered["status"], "idle");
    assert_eq!(answered["reply"], "Answer 1.");

    let journal = app.journal(&id).await;
    assert_eq!(
        kinds(&journal),
        [
            "session_created",
            "user_message",
            "model_call_started",
            "model_call_finished",
            "assistant_message",
            "turn_finished",
        ]
    );
    assert_eq!(journal[5]["payload"], json!({ "reason": "completed" }));
    let seqs: Vec<i64> = journal.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=6).collect::<Vec<_>>());

    let (_, page) = app
        .call(
            "GET",
            &format!("/v1/sessions/{id}/events?after=4&limit=1"),
            None,
        )
        .await;
    assert_eq!(page["events"], json!([journal[4]]));
    assert_eq!(page["last_seq"], 6);

    let (status, listed) = app.call("GET", "/v1/sessions?agent=ops", None).await;
    assert_eq!(status, 200);
    assert_eq!(listed["sessions"][0]["id"], json!(id));
    assert_eq!(listed["sessions"][0]["last_seq"], 6);

    let (_, before_answer) = app
        .call("GET", &format!("/v1/sessions/{id}/state?at=2"), None)
        .await;
    assert_eq!(before_answer["status"], "running");
    assert_eq!(before_answer["seq"], 2);

    let (status, fork) = app
        .call(
            "POST",
            &format!("/v1/sessions/{id}/fork"),
            Some(json!({ "at": 2 })),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    assert_eq!(fork["forked_from"], json!({ "session_id": id, "at": 2 }));
    assert!(fork["token"].is_string());

    let (status, closed) = app
        .call("DELETE", &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!((status, &closed["status"]), (200, &json!("closed")));
    let (status, refused) = app.say(&id, "Still there?").await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (409, &json!("session_ended"))
    );
    assert_eq!(
        app.journal(&id).await.len(),
        7,
        "only session_closed was added"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_resumes_after_a_seq_in_order() {
    let app = app().await;
    let (id, token) = app.create("ops").await;
    app.say(&id, "First?").await;
    let journal = app.journal(&id).await;

    let mut ws = app.ws(&id, &token, "&after_seq=2").await;
    let hello = ws.next().await.unwrap();
    assert_eq!(
        hello,
        json!({ "type": "hello", "session_id": id, "last_seq": 6, "status": "idle" })
    );
    let mut resumed = Vec::new();
    for _ in 3..=6 {
        let mut frame = ws.next().await.unwrap();
        assert_eq!(frame["type"], "event");
        frame.as_object_mut().unwrap().remove("type");
        resumed.push(frame);
    }
    assert_eq!(resumed, journal[2..].to_vec());

    ws.send(json!({ "type": "user_message", "text": "Second?", "client_id": "c2" }))
        .await;
    let frames = ws.until_event("turn_finished").await;
    let events = stead_testkit::client::events(&frames);
    assert_eq!(
        events.first().unwrap()["seq"],
        7,
        "live frames follow the resume"
    );
    assert_eq!(events.first().unwrap()["payload"]["client_id"], "c2");
    assert_eq!(stead_testkit::client::streamed_text(&frames), "Answer 3.");
    assert_eq!(app.journal(&id).await[6..].to_vec(), events);
}

/// A loop of `resume {after_seq: 0}` replayed the whole journal
/// per frame. The first resume replays; one sooner than 5 s after it gets `rate_limited` and
/// nothing more; the connection stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_resume_within_its_interval_replays_nothing() {
    let app = app().await;
    let (id, token) = app.create("ops").await;
    app.say(&id, "First?").await;
    let mut ws = app.ws(&id, &token, "").await;
    assert_eq!(ws.next().await.unwrap()["type"], "hello");
    ws.send(json!({ "type": "resume", "after_seq": 0 })).await;
    for seq in 1..=6 {
        let frame = ws.next().await.unwrap();
        assert_eq!(
            (frame["type"].as_str(), frame["seq"].as_i64()),
            (Some("event"), Some(seq))
        );
    }
    ws.send(json!({ "type": "resume", "after_seq": 0 })).await;
    let refused = ws.next().await.unwrap();
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["code"], "rate_limited", "{refused}");
    // Still open: a message is answered as usual, its events start after the journal.
    ws.send(json!({ "type": "user_message", "text": "Second?", "client_id": "c2" }))
        .await;
    let frames = ws.until_event("turn_finished").await;
    let events = stead_testkit::client::events(&frames);
    assert_eq!(events.first().unwrap()["seq"], 7, "{frames:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operational_endpoints_answer_without_a_model() {
    let app = app().await;
    let (status, health) = app.call("GET", "/healthz", None).await;
    assert_eq!((status, &health["status"]), (200, &json!("ok")));
    let (status, _) = app.call("GET", "/readyz", None).await;
    assert_eq!(status, 200);
    let (status, openapi) = app.call("GET", "/openapi.json", None).await;
    assert_eq!(status, 200);
    assert!(openapi["paths"]["/v1/sessions"]["post"].is_object());
    let (status, agents) = app.call("GET", "/v1/agents", None).await;
    assert_eq!(status, 200);
    assert_eq!(agents["agents"][0]["name"], "ops");
}

/// A client that attaches after a call finished gets no ghost `delta` of that call's text:
/// the text is in the journal's `model_call_finished`, and the stream buffer is cleared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_answer_is_not_streamed_again_to_a_later_client() {
    let app = app().await;
    let (id, token) = app.create("ops").await;
    let (_, answered) = app.say(&id, "First?").await;
    let last_seq = answered["last_seq"].as_i64().unwrap();
    let mut ws = app.ws(&id, &token, &format!("&after_seq={last_seq}")).await;
    assert_eq!(ws.next().await.unwrap()["type"], "hello");
    let extra = tokio::time::timeout(std::time::Duration::from_millis(600), ws.next()).await;
    assert!(extra.is_err(), "a frame after hello: {extra:?}");
}

/// A new token replaces the old one: after `POST /v1/sessions/{id}/token` the old token is
/// refused everywhere (REST and WebSocket), the new one works; the session's own token may
/// rotate itself, and an operator may rotate it (e.g. to revoke a leaked token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_a_session_token_invalidates_the_old_one() {
    let model = stead_testkit::model::ScriptedModel::respond(|_| ("ok".to_string(), vec![]));
    let limits = stead_http::Limits {
        ws_heartbeat: std::time::Duration::from_millis(200),
        ..Default::default()
    };
    let app = stead_testkit::app::App::start_with(
        vec![stead_testkit::app::ops_agent()],
        std::sync::Arc::new(model),
        &[],
        limits,
        Default::default(),
    )
    .await;
    let (id, first) = app.create("ops").await;
    let path = format!("/v1/sessions/{id}");
    let rotate = format!("/v1/sessions/{id}/token");
    assert_eq!(app.call_as("GET", &path, None, Some(&first)).await.0, 200);
    // A WebSocket opened with the token before the rotation, and one with a ticket.
    let mut open_before = app.ws(&id, &first, "").await;
    assert_eq!(open_before.next().await.unwrap()["type"], "hello");
    let (status, issued) = app
        .call_as(
            "POST",
            &format!("/v1/sessions/{id}/ticket"),
            None,
            Some(&first),
        )
        .await;
    assert_eq!(status, 200, "{issued}");
    let ticket = issued["ticket"].as_str().unwrap().to_string();
    // A ticket opens the WebSocket only: it is no token for REST.
    assert_eq!(app.call_as("GET", &path, None, Some(&ticket)).await.0, 401);
    let ws_url = |query: &str| {
        format!(
            "{}/v1/sessions/{id}/ws?{query}",
            app.base.replace("http://", "ws://")
        )
    };
    let (stream, _) = tokio_tungstenite::connect_async(ws_url(&format!("ticket={ticket}")))
        .await
        .unwrap();
    let mut by_ticket = stead_testkit::client::Ws { stream };
    assert_eq!(by_ticket.next().await.unwrap()["type"], "hello");
    // And one with the token in `x-api-key` (it used to survive the rotation, as
    // only `?token=` and `Bearer` were re-checked).
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(ws_url(
            "after_seq=0",
        ))
        .unwrap();
    request
        .headers_mut()
        .insert("x-api-key", first.parse().unwrap());
    let (stream, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let mut by_header = stead_testkit::client::Ws { stream };
    assert_eq!(by_header.next().await.unwrap()["type"], "hello");

    let (status, issued) = app.call_as("POST", &rotate, None, Some(&first)).await;
    assert_eq!(status, 200, "{issued}");
    assert_eq!(issued["session_id"], id.as_str());
    let second = issued["token"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    let (status, refused) = app.call_as("GET", &path, None, Some(&first)).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (401, Some("invalid_credentials")),
        "{refused}"
    );
    assert_eq!(app.call_as("GET", &path, None, Some(&second)).await.0, 200);
    // Connections opened with the old token or its ticket are closed at their next heartbeat.
    for ws in [&mut open_before, &mut by_ticket, &mut by_header] {
        let closed = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while ws.next().await.is_some() {}
        })
        .await;
        assert!(closed.is_ok(), "a connection outlived its rotated token");
    }
    // The old ticket is refused too.
    assert!(
        tokio_tungstenite::connect_async(ws_url(&format!("ticket={ticket}")))
            .await
            .is_err()
    );
    let url = format!(
        "{}/v1/sessions/{id}/ws?token={first}",
        app.base.replace("http://", "ws://")
    );
    match tokio_tungstenite::connect_async(url.as_str()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 401)
        }
        other => panic!("an old token opened a WebSocket: {:?}", other.map(|_| ())),
    }

    // The operator (here: loopback without keys) revokes the current token by rotating.
    let (status, issued) = app.call("POST", &rotate, None).await;
    assert_eq!(status, 200, "{issued}");
    let third = issued["token"].as_str().unwrap();
    assert_eq!(app.call_as("GET", &path, None, Some(&second)).await.0, 401);
    assert_eq!(app.call_as("GET", &path, None, Some(third)).await.0, 200);
    // A token of this session cannot rotate another session's.
    let (other, _) = app.create("ops").await;
    let (status, _) = app
        .call_as(
            "POST",
            &format!("/v1/sessions/{other}/token"),
            None,
            Some(third),
        )
        .await;
    assert_eq!(status, 403);
}

/// `DELETE /v1/sessions/{id}?purge=true`: operators only; the session's actor stops and the
/// session is gone (404 afterwards), while a plain `DELETE` only closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_purges_a_session_for_good() {
    let model = stead_testkit::model::ScriptedModel::respond(|_| ("ok".to_string(), vec![]));
    let key = "operator-key-0123456789";
    let mut app = stead_testkit::app::App::start(
        vec![stead_testkit::app::ops_agent()],
        std::sync::Arc::new(model),
        &[key],
    )
    .await;
    app.api_key = Some(key.into());
    let (id, token) = app.create("ops").await;
    let (status, _) = app.say(&id, "remember my card number").await;
    assert_eq!(status, 200);
    let events = app.journal(&id).await.len();
    let purge = format!("/v1/sessions/{id}?purge=true");
    let (status, refused) = app.call_as("DELETE", &purge, None, Some(&token)).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (403, Some("forbidden"))
    );
    assert_eq!(
        app.journal(&id).await.len(),
        events,
        "a refused purge removes nothing"
    );

    let (status, purged) = app.call("DELETE", &purge, None).await;
    assert_eq!(status, 200, "{purged}");
    assert_eq!(
        purged,
        serde_json::json!({ "session_id": id, "purged": true, "events": events, "request_log_rows": 0, "artifacts": 0 })
    );
    let (status, _) = app.call("GET", &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(status, 404);
    let (status, _) = app
        .call("GET", &format!("/v1/sessions/{id}/events"), None)
        .await;
    assert_eq!(status, 404);
    let (status, _) = app.call("DELETE", &purge, None).await;
    assert_eq!(status, 404);
}

/// A message's `mode` over REST and the WebSocket: `drop_if_busy` is refused with
/// 409 `busy` and journals nothing; `interrupt` cancels the running turn and runs at once;
/// `steer` joins the running turn; bad modes are 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_mode_refuses_interrupts_or_steers_a_running_turn() {
    let model = ScriptedModel::respond(|request| {
        let asked = request.transcript.len();
        (format!("Answer {asked}."), vec![])
    })
    .with_delay(std::time::Duration::from_millis(1500));
    let app = App::start(vec![ops_agent()], Arc::new(model), &[]).await;
    let (id, token) = app.create("ops").await;
    let post = |text: &str, mode: &str| json!({ "text": text, "mode": mode });
    let path = format!("/v1/sessions/{id}/messages");
    let (status, _) = app.call("POST", &path, Some(post("slow", "queue"))).await;
    assert_eq!(status, 202);
    let before = app.journal(&id).await.len();
    let (status, body) = app
        .call("POST", &path, Some(post("busy?", "drop_if_busy")))
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("busy")),
        "{body}"
    );
    let (status, body) = app.call("POST", &path, Some(post("x", "shout"))).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (422, &json!("invalid_request")),
        "{body}"
    );
    assert_eq!(
        app.journal(&id).await.len(),
        before,
        "refusals journal nothing"
    );

    let mut ws = app.ws(&id, &token, "").await;
    ws.send(json!({ "type": "user_message", "text": "instead", "mode": "interrupt" }))
        .await;
    let frames = ws.until_event("turn_cancelled").await;
    let interrupt = stead_testkit::client::events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "user_message")
        .unwrap();
    assert_eq!(
        interrupt["payload"],
        json!({ "text": "instead", "client_id": null, "mode": "interrupt" })
    );
    ws.send(json!({ "type": "user_message", "text": "and briefly", "mode": "steer" }))
        .await;
    let frames = ws.until_event("turn_finished").await;
    let steer = stead_testkit::client::events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "user_message")
        .unwrap();
    assert_eq!(steer["payload"]["mode"], "steer");
    // The steering text had no model call left in its turn: it starts the next one.
    let frames = ws.until_event("turn_finished").await;
    let answered = stead_testkit::client::events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap();
    // The transcript then holds: slow, instead, Answer, and briefly → 4 entries before it.
    assert_eq!(answered["payload"]["text"], "Answer 4.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_sessions_are_listed_by_their_parent() {
    let app = app().await;
    let (parent, _) = app.create("ops").await;
    let parent_id: uuid::Uuid = parent.parse().unwrap();
    let child = app
        .store
        .create_session(stead_persistence::NewSession {
            project_id: stead_persistence::DEFAULT_PROJECT,
            parent: Some(stead_persistence::ParentLink {
                session_id: parent_id,
                call_id: "t1".into(),
            }),
            ..stead_persistence::NewSession::for_agent("ops")
        })
        .await
        .unwrap();
    let (status, page) = app
        .call("GET", &format!("/v1/sessions?parent={parent}"), None)
        .await;
    assert_eq!(status, 200, "{page}");
    let rows = page["sessions"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], json!(child.id));
    assert_eq!(rows[0]["parent_session_id"], json!(parent));
    assert_eq!(rows[0]["parent_call_id"], "t1");
    // Sessions without a parent carry no parent fields.
    let (_, all) = app.call("GET", "/v1/sessions", None).await;
    let top = all["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == json!(parent))
        .unwrap();
    assert!(top.get("parent_session_id").is_none(), "{top}");
    let (status, children) = app
        .call("GET", &format!("/v1/sessions/{parent}/children"), None)
        .await;
    assert_eq!(status, 200, "{children}");
    assert_eq!(children["sessions"], page["sessions"]);
    let (status, body) = app.call("GET", "/v1/sessions?parent=nope", None).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_query")),
        "{body}"
    );
}

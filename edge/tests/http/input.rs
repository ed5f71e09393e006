//! Bad input at the HTTP edge (docs/architecture.md, invariant 6): each malformed or
//! unauthorized request gets its documented status or error frame with a stable `code`, the
//! connection and server keep serving, and the session's journal is unchanged (compared by
//! value). In process: the real router, store and session actors; the model is the scripted
//! double, answering "ok".

use std::sync::Arc;

use serde_json::{json, Value};
use stead_testkit::app::{ops_agent, App};
use stead_testkit::client::Api;
use stead_testkit::model::ScriptedModel;

/// The app with the `ops` agent (no tools) answering "ok"; `api_keys` as configured.
async fn app(api_keys: &[&str]) -> App {
    let model = ScriptedModel::respond(|_| ("ok".to_string(), vec![]));
    App::start(vec![ops_agent()], Arc::new(model), api_keys).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rest_requests_get_documented_errors_and_change_nothing() {
    let server = app(&[]).await;
    let (id, _) = server.create("ops").await;
    let (_, answered) = server.say(&id, "hi").await;
    assert_eq!(answered["status"], "idle");
    let journal = server.journal(&id).await;
    let sessions = server.call("GET", "/v1/sessions", None).await.1;
    let s = format!("/v1/sessions/{id}");
    let unknown = "/v1/sessions/01a22bba-a0b2-77e2-9503-a1f53cea95c8";
    let big_text = "x".repeat(40 << 10);
    let big_body = format!(r#"{{"text":"{}"}}"#, "y".repeat(2 << 20)).into_bytes();

    let json_cases: Vec<(&str, String, Option<Value>, u16, &str)> = vec![
        (
            "POST",
            "/v1/sessions".into(),
            Some(json!({ "agent": 5 })),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/sessions".into(),
            Some(json!({})),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/sessions".into(),
            Some(json!({ "agent": "nope" })),
            422,
            "unknown_agent",
        ),
        (
            "POST",
            "/v1/sessions".into(),
            Some(json!({ "agent": "ops", "metadata": [1] })),
            422,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/sessions".into(),
            Some(json!({ "agent": "ops", "extra": 1 })),
            422,
            "invalid_request",
        ),
        (
            "POST",
            format!("{s}/messages"),
            Some(json!({ "text": 5 })),
            422,
            "invalid_request",
        ),
        (
            "POST",
            format!("{s}/messages"),
            Some(json!({})),
            422,
            "invalid_request",
        ),
        (
            "POST",
            format!("{s}/messages"),
            Some(json!({ "text": "  " })),
            422,
            "invalid_request",
        ),
        (
            "POST",
            format!("{s}/messages"),
            Some(json!({ "text": big_text })),
            413,
            "message_too_large",
        ),
        (
            "POST",
            format!("{s}/messages?wait=maybe"),
            Some(json!({ "text": "hi" })),
            400,
            "invalid_query",
        ),
        (
            "POST",
            format!("{unknown}/messages"),
            Some(json!({ "text": "hi" })),
            404,
            "session_not_found",
        ),
        (
            "POST",
            "/v1/sessions/not-a-uuid/messages".into(),
            Some(json!({ "text": "hi" })),
            400,
            "invalid_id",
        ),
        (
            "GET",
            "/v1/sessions/not-a-uuid".into(),
            None,
            400,
            "invalid_id",
        ),
        ("GET", unknown.into(), None, 404, "session_not_found"),
        (
            "GET",
            format!("{s}/events?after=-1"),
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            format!("{s}/events?limit=abc"),
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            format!("{s}/events?limit=0"),
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/v1/sessions?status=bogus".into(),
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/v1/sessions?cursor=garbage".into(),
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/v1/approvals?status=done".into(),
            None,
            400,
            "invalid_query",
        ),
        (
            "POST",
            format!("{s}/approvals/t9"),
            Some(json!({ "approved": true })),
            404,
            "approval_not_found",
        ),
        (
            "POST",
            format!("{s}/approvals/t9"),
            Some(json!({ "approved": "yes" })),
            422,
            "invalid_request",
        ),
        (
            "POST",
            format!("{s}/cancel"),
            None,
            409,
            "nothing_to_cancel",
        ),
        (
            "GET",
            format!("{s}/state?at=0"),
            None,
            422,
            "seq_out_of_range",
        ),
        ("GET", format!("{s}/state?at=x"), None, 400, "invalid_query"),
        (
            "POST",
            format!("{s}/fork"),
            Some(json!({ "at": 999 })),
            422,
            "seq_out_of_range",
        ),
        (
            "POST",
            format!("{s}/fork"),
            Some(json!({ "at": 1, "overrides": { "route": "nowhere" } })),
            422,
            "unknown_route",
        ),
        ("GET", "/v1/nothing-here".into(), None, 404, "not_found"),
        (
            "PUT",
            "/v1/sessions".into(),
            None,
            405,
            "method_not_allowed",
        ),
    ];
    for (method, path, body, status, code) in json_cases {
        let (got, answer) = server.call(method, &path, body.clone()).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{method} {path} {body:?} → {answer}"
        );
        assert!(answer["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    let raw_cases: Vec<(String, &str, Vec<u8>, u16, &str)> = vec![
        (
            format!("{s}/messages"),
            "application/json",
            b"{\"text\": ".to_vec(),
            400,
            "invalid_json",
        ),
        (
            format!("{s}/messages"),
            "application/json",
            b"\xff\xfe".to_vec(),
            400,
            "invalid_json",
        ),
        (
            format!("{s}/messages"),
            "text/plain",
            b"{\"text\":\"hi\"}".to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            format!("{s}/messages"),
            "application/json",
            big_body,
            413,
            "payload_too_large",
        ),
    ];
    for (path, content_type, body, status, code) in raw_cases {
        let (got, answer) = server.raw("POST", &path, content_type, body).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "POST {path} ({content_type}) → {answer}"
        );
    }
    assert_eq!(
        server.journal(&id).await,
        journal,
        "the journal is unchanged"
    );
    assert_eq!(server.call("GET", "/v1/sessions", None).await.1, sessions);
    assert_eq!(server.call("GET", "/healthz", None).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_websocket_frames_get_error_frames_and_the_connection_stays() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let server = app(&[]).await;
    let (id, token) = server.create("ops").await;
    let journal = server.journal(&id).await;
    let mut ws = server.ws(&id, &token, "").await;
    assert_eq!(ws.next().await.unwrap()["type"], "hello");
    let cases: Vec<(String, &str)> = vec![
        ("{not json".into(), "invalid_json"),
        ("[1,2]".into(), "invalid_frame"),
        (r#"{"type":"shout"}"#.into(), "unknown_frame_type"),
        (
            r#"{"type":"user_message","text":5}"#.into(),
            "invalid_frame",
        ),
        (r#"{"type":"user_message"}"#.into(), "invalid_frame"),
        (
            r#"{"type":"user_message","text":""}"#.into(),
            "invalid_request",
        ),
        (
            r#"{"type":"approval","call_id":"t7","approved":true}"#.into(),
            "approval_not_found",
        ),
        (
            r#"{"type":"approval","call_id":"t7"}"#.into(),
            "invalid_frame",
        ),
        (
            r#"{"type":"resume","after_seq":-4}"#.into(),
            "invalid_frame",
        ),
        (r#"{"type":"cancel"}"#.into(), "nothing_to_cancel"),
        (
            format!(
                r#"{{"type":"user_message","text":"{}"}}"#,
                "z".repeat(100 << 10)
            ),
            "frame_too_large",
        ),
    ];
    for (text, code) in cases {
        ws.send_text(text.clone()).await;
        let error = ws.until_error().await;
        assert_eq!(error["code"], code, "{}", &text[..text.len().min(80)]);
    }
    ws.stream
        .send(Message::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    assert_eq!(ws.until_error().await["code"], "unsupported_frame");
    assert_eq!(
        server.journal(&id).await,
        journal,
        "the journal is unchanged"
    );
    // Still serving: a good message works on the same connection.
    ws.send(json!({ "type": "user_message", "text": "hi" }))
        .await;
    ws.until_event("turn_finished").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_and_session_tokens_are_enforced() {
    let hashed = "sha256:0c8a8d1b4e2b16b6b0a1e5b9f1f1b8c4f2fe2d3b1b0b8f6f1f0b8f9f1b0b8f6f";
    let mut server = app(&["operator-key-0123456789", hashed]).await;
    server.api_key = Some("operator-key-0123456789".into());
    let (a, token_a) = server.create("ops").await;
    let (b, _) = server.create("ops").await;
    let journal_b = server.journal(&b).await;
    let cases: Vec<(&str, String, Option<&str>, u16, &str)> = vec![
        (
            "GET",
            "/v1/sessions".into(),
            None,
            401,
            "missing_credentials",
        ),
        (
            "GET",
            "/v1/sessions".into(),
            Some("wrong-key-0123456789"),
            401,
            "invalid_credentials",
        ),
        (
            "GET",
            "/v1/sessions".into(),
            Some(&token_a),
            403,
            "forbidden",
        ),
        ("GET", "/v1/agents".into(), Some(&token_a), 403, "forbidden"),
        (
            "GET",
            format!("/v1/sessions/{b}"),
            Some(&token_a),
            403,
            "forbidden",
        ),
        (
            "GET",
            format!("/v1/sessions/{b}/events"),
            Some(&token_a),
            403,
            "forbidden",
        ),
        (
            "POST",
            format!("/v1/sessions/{b}/cancel"),
            Some(&token_a),
            403,
            "forbidden",
        ),
        (
            "GET",
            format!("/v1/sessions/{a}"),
            Some("garbage.token"),
            401,
            "invalid_credentials",
        ),
    ];
    for (method, path, bearer, status, code) in cases {
        let (got, answer) = server.call_as(method, &path, None, bearer).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{method} {path} as {bearer:?} → {answer}"
        );
    }
    // The session's own token works for its session, over REST and WebSocket.
    let (status, own) = server
        .call_as("GET", &format!("/v1/sessions/{a}"), None, Some(&token_a))
        .await;
    assert_eq!((status, own["id"].as_str()), (200, Some(a.as_str())));
    let mut ws = server.ws(&a, &token_a, "").await;
    assert_eq!(ws.next().await.unwrap()["type"], "hello");
    // Another session's token or a wrong one cannot open a WebSocket.
    for (token, status) in [(token_a.as_str(), 403), ("nope", 401)] {
        let url = format!(
            "{}/v1/sessions/{b}/ws?token={token}",
            server.base.replace("http://", "ws://")
        );
        match tokio_tungstenite::connect_async(url).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                assert_eq!(response.status().as_u16(), status)
            }
            other => panic!("expected HTTP {status}, got {:?}", other.map(|_| ())),
        }
    }
    assert_eq!(server.journal(&b).await, journal_b);
    // Health stays open for probes.
    assert_eq!(server.call_as("GET", "/healthz", None, None).await.0, 200);
}

/// A NUL character (which the journal cannot store) never wedges a turn: a user message with
/// one is refused with 422; a model answer with one fails its call clearly, and the session
/// takes the next message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_character_is_refused_or_fails_the_call_and_never_wedges_a_turn() {
    let model = ScriptedModel::respond(|request| {
        let asked = format!("{:?}", request.transcript.last());
        if asked.contains("poison") {
            ("bad\u{0}answer".to_string(), vec![])
        } else {
            ("fine".to_string(), vec![])
        }
    });
    let server = App::start(vec![ops_agent()], Arc::new(model), &[]).await;
    let (id, _) = server.create("ops").await;
    let journal = server.journal(&id).await;
    let (status, refused) = server.say(&id, "hello\u{0}there").await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (422, Some("invalid_request")),
        "{refused}"
    );
    assert_eq!(server.journal(&id).await, journal, "nothing was journaled");

    let (status, answered) = server.say(&id, "poison me").await;
    assert_eq!(
        (status, &answered["status"]),
        (200, &json!("idle")),
        "{answered}"
    );
    let journal = server.journal(&id).await;
    let failed = journal
        .iter()
        .find(|e| e["kind"] == "model_call_failed")
        .expect("the call failed");
    assert!(failed["payload"]["error"]
        .as_str()
        .is_some_and(|e| e.contains("NUL")));
    assert_eq!(
        journal.last().unwrap()["payload"],
        json!({ "reason": "model_failed" })
    );

    let (status, answered) = server.say(&id, "and now?").await;
    assert_eq!(
        (status, &answered["reply"]),
        (200, &json!("fine")),
        "{answered}"
    );
}

/// A session whose lease another node holds answers 409 `session_elsewhere` without naming
/// that node (a node name is often an internal host name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_elsewhere_does_not_name_the_other_node() {
    let server = app(&[]).await;
    let session = server
        .store
        .create_session(stead_persistence::NewSession::for_agent("ops"))
        .await
        .unwrap();
    server
        .store
        .acquire_lease(
            session.id,
            "db-7.internal.example",
            std::time::Duration::from_secs(600),
        )
        .await
        .unwrap();
    let (status, refused) = server
        .call(
            "POST",
            &format!("/v1/sessions/{}/messages", session.id),
            Some(json!({ "text": "hi" })),
        )
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (409, Some("session_elsewhere")),
        "{refused}"
    );
    assert!(!refused.to_string().contains("internal"), "{refused}");
}

/// `/openapi.json` is public, but the configured agent and route names are for operators only
/// (as `/v1/agents` is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_openapi_document_names_no_agents() {
    let mut server = app(&["operator-key-0123456789"]).await;
    let (status, public) = server.call("GET", "/openapi.json", None).await;
    assert_eq!(status, 200);
    let agent = &public["components"]["schemas"]["CreateSession"]["properties"]["agent"];
    assert!(agent.is_object() && agent.get("enum").is_none(), "{agent}");
    assert!(!public.to_string().contains("\"ops\""));
    server.api_key = Some("operator-key-0123456789".into());
    let (status, operator) = server.call("GET", "/openapi.json", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        operator["components"]["schemas"]["CreateSession"]["properties"]["agent"]["enum"],
        json!(["ops"])
    );
}

/// A session holds at most `max_queued_messages` user messages while a turn runs; one more is
/// refused with 429 `queue_full` and journals nothing. Its model calls name who they are
/// charged to (the key that created it) and carry its metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_queues_at_most_its_allowance_and_its_calls_name_their_principal() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let model = ScriptedModel::respond(move |request| {
        record
            .lock()
            .unwrap()
            .push((request.principal.clone(), request.metadata.clone()));
        ("ok".to_string(), vec![])
    })
    .with_delay(std::time::Duration::from_secs(3));
    let key = "operator-key-0123456789";
    let mut server = App::start(vec![ops_agent()], Arc::new(model), &[key]).await;
    server.api_key = Some(key.into());
    let (status, created) = server
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({ "agent": "ops", "metadata": { "customer": "acme" } })),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let path = format!("/v1/sessions/{id}/messages");
    let send = |text: String| server.call("POST", &path, Some(json!({ "text": text })));
    // The first message starts a turn (its model call takes 3 s); 32 more queue behind it.
    for i in 0..33 {
        let (status, body) = send(format!("message {i}")).await;
        assert_eq!(status, 202, "message {i}: {body}");
    }
    let journal = server.journal(id).await;
    let (status, refused) = send("one too many".into()).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (429, Some("queue_full")),
        "{refused}"
    );
    assert_eq!(server.journal(id).await, journal, "nothing was journaled");

    // The running call names the key's fingerprint and the session's metadata.
    let started = std::time::Instant::now();
    while seen.lock().unwrap().is_empty() && started.elapsed().as_secs() < 10 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (principal, metadata) = seen.lock().unwrap()[0].clone();
    assert_eq!(principal.len(), 8, "{principal}");
    assert!(principal.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(Value::Object(metadata), json!({ "customer": "acme" }));
    assert_eq!(journal[0]["payload"]["principal"], principal.as_str());
}

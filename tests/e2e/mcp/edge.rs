//! Stead's own `/mcp` endpoint on a keyed server, at its edge: an anonymous
//! `initialize` is refused before rmcp creates a session, a session answers only the
//! credential that created it, live sessions are capped per credential (429
//! `too_many_mcp_sessions`) while another credential still gets one, and a body over the
//! server's limit is refused (413).

use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;

const KEY: &str = "mcp-edge-key-0123456789";
const OTHER: &str = "mcp-edge-key-9876543210";

fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "edge-test", "version": "1"}
        }
    })
}

/// POSTs `body` to `/mcp` with `key` (and `session`): the status, the session id answered and
/// the `error.code` of a refusal.
async fn post(
    http: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    session: Option<&str>,
    body: String,
) -> (u16, Option<String>, Option<String>) {
    let mut request = http
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let id = session_id(response.headers());
    let code = if status >= 400 {
        let text = response.text().await.unwrap_or_default();
        serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
    } else {
        None
    };
    (status, id, code)
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_endpoint_authenticates_binds_and_caps_its_sessions() {
    let fake = stead_testkit::ops::upstream().await;
    let (hook_url, _hook) = stead_testkit::ops::webhook().await;
    let server = Stead::start(
        &stead_testkit::ops::config(
            &fake.base_url,
            &hook_url,
            &format!("[server]\napi_keys = [\"{KEY}\", \"{OTHER}\"]"),
        ),
        None,
    );
    let http = reqwest::Client::new();
    let base = &server.base;
    let init = initialize().to_string();

    // No credential, or a wrong one: refused at the edge, no session.
    let (status, id, code) = post(&http, base, None, None, init.clone()).await;
    assert_eq!(
        (status, id, code.as_deref()),
        (401, None, Some("missing_credentials"))
    );
    let (status, _, _) = post(
        &http,
        base,
        Some("wrong-key-0123456789"),
        None,
        init.clone(),
    )
    .await;
    assert_eq!(status, 401);

    // A session of KEY answers KEY, and is unknown to OTHER.
    let (status, id, _) = post(&http, base, Some(KEY), None, init.clone()).await;
    assert_eq!(status, 200);
    let id = id.expect("a session id");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let (status, _, code) = post(&http, base, Some(OTHER), Some(&id), list.clone()).await;
    assert_eq!((status, code.as_deref()), (404, Some("not_found")));

    // KEY may hold 16 live sessions; the 17th is refused, OTHER still gets one.
    for n in 1..stead_agents::mcp::endpoint::MAX_SESSIONS_PER_CREDENTIAL {
        let (status, id, _) = post(&http, base, Some(KEY), None, init.clone()).await;
        assert_eq!(status, 200, "session {n}");
        assert!(id.is_some());
    }
    let (status, id, code) = post(&http, base, Some(KEY), None, init.clone()).await;
    assert_eq!(
        (status, id, code.as_deref()),
        (429, None, Some("too_many_mcp_sessions"))
    );
    let (status, id, _) = post(&http, base, Some(OTHER), None, init.clone()).await;
    assert_eq!(status, 200);
    assert!(id.is_some());

    // A body over the server's limit (1 MiB) is refused before rmcp reads it.
    let big = json!({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"pad": "x".repeat(2 << 20)}});
    let (status, _, code) = post(&http, base, Some(OTHER), None, big.to_string()).await;
    assert_eq!((status, code.as_deref()), (413, Some("payload_too_large")));
    assert_eq!(server.call("GET", "/healthz", None).await.0, 200);
}

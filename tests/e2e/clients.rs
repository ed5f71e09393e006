//! The client libraries against a running `stead serve` whose model is a scripted upstream double
//! (docs/clients.md): `@stead/client` in Node (`clients/typescript/client/test/live.mjs`, the
//! `ws` package as its WebSocket), the `stead` Python package (`tests/clients/stead_python.py`,
//! installed from `clients/python` by scripts/test.sh), the AI SDK example app
//! (`examples/ai-sdk-chat`) driven in Debian's Chromium across origins, and `server.cors_origins`
//! on keyed and open servers.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::external;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

const KEY: &str = "sk-clients-test-0123456789";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A route to the double and the `ops` agent whose `clock` tool needs approval.
fn config(up: &Upstream, server: &str) -> String {
    up.config(
        "default",
        r#"model = "double""#,
        &format!(
            r#"[[agents]]
name = "ops"
route = "default"
system_prompt = "You are an operations assistant."

[[agents.tools]]
name = "clock"
kind = "clock"
approval = "always"

[server]
{server}
"#
        ),
    )
}

async fn clock_then(replies: Vec<Reply>) -> Upstream {
    let mut all = vec![Reply::Tool {
        name: "clock".into(),
        arguments: json!({}),
    }];
    all.extend(replies);
    Upstream::start(all, Reply::text("Nothing new.")).await
}

async fn checks(command: Command, expected: usize) {
    external::checks(command, Duration::from_secs(180), expected).await;
}

/// On this machine's Node and on Node 18 (what Debian 12 ships; `NODE18`, from the PyPI
/// package `nodejs-bin`, installed by scripts/test.sh).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_client_drives_a_session_from_node() {
    assert!(
        root()
            .join("node_modules/@stead/client/dist/index.js")
            .is_file(),
        "needs the client packages built (scripts/build-web-ui.sh)"
    );
    let node18 = std::env::var("NODE18")
        .expect("needs NODE18 (scripts/test.sh installs Node 18 from PyPI's nodejs-bin)");
    for node in ["node", node18.as_str()] {
        let up = clock_then(vec![Reply::text("It is noon.")]).await;
        let server = Stead::start(&config(&up, &format!("api_keys = [\"{KEY}\"]")), None);
        let mut command = Command::new(node);
        command
            .current_dir(root())
            .arg("clients/typescript/client/test/live.mjs")
            .arg(&server.base)
            .arg(KEY);
        let checks = external::checks(command, Duration::from_secs(180), 10).await;
        eprintln!("@stead/client on Node {}", checks[0]["version"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_drives_a_session_and_its_approval() {
    let python = std::env::var("CLIENT_PYTHON")
        .expect("needs CLIENT_PYTHON (scripts/test.sh installs clients/python into a venv)");
    let up = clock_then(vec![Reply::text("It is noon.")]).await;
    let server = Stead::start(&config(&up, &format!("api_keys = [\"{KEY}\"]")), None);
    let mut command = Command::new(python);
    command
        .arg(root().join("tests/clients/stead_python.py"))
        .arg(&server.base)
        .arg(KEY)
        .env("NO_PROXY", "*");
    checks(command, 13).await;
}

/// A child process stopped (and reaped) when the test ends, passed or not.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_example_chats_with_approvals_and_resumes_in_chromium() {
    let example = root().join("examples/ai-sdk-chat");
    assert!(
        example.join("dist/index.html").is_file(),
        "needs the example built (scripts/build-web-ui.sh)"
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).is_file(),
        "needs Chromium at {chromium}"
    );
    let story = "Once upon a time a small robot learned to bake bread for the whole village, \
                 and every morning the bakery smelled of warm loaves, and they lived happily ever after.";
    let up = clock_then(vec![
        Reply::text("It is noon."),
        Reply::Text {
            text: story.into(),
            delay: Duration::ZERO,
            chunk_delay: Duration::from_millis(200),
            completion_tokens: 30,
        },
    ])
    .await;
    let port = free_port();
    let app = format!("http://127.0.0.1:{port}");
    let server = Stead::start(
        &config(
            &up,
            &format!("api_keys = [\"{KEY}\"]\ncors_origins = [\"{app}\"]"),
        ),
        None,
    );
    // The example's own server holds the operator key; the browser gets a session token.
    let _app_server = KillOnDrop(
        Command::new("node")
            .current_dir(&example)
            .arg("server.mjs")
            .env("PORT", port.to_string())
            .env("STEAD_URL", &server.base)
            .env("STEAD_API_KEY", KEY)
            .env("STEAD_AGENT", "ops")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while reqwest::get(&app).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the example server did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ai-sdk-screenshots");
    let _ = std::fs::remove_dir_all(&out);
    let mut command = Command::new("node");
    command
        .current_dir(&example)
        .arg("e2e/chat.mjs")
        .arg(&app)
        .arg(&out)
        .env("CHROMIUM", &chromium)
        .env("STEAD_API_KEY", KEY);
    let result = external::run(command, Duration::from_secs(240), "the browser run failed").await;
    let steps: Vec<Value> = result
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(steps.len(), 6, "{}", result.stdout);
    assert_eq!(steps[4]["once"], 1, "{}", result.stdout);
    for shot in [
        "01-ai-sdk-approval",
        "02-ai-sdk-answer",
        "03-ai-sdk-resumed",
    ] {
        assert!(out.join(format!("{shot}.png")).is_file(), "{shot}");
    }
    // The tool ran once, approved, and the session's journal holds both turns.
    let (_, sessions) = server.call_as("GET", "/v1/sessions", None, Some(KEY)).await;
    let id = sessions["sessions"][0]["id"].as_str().unwrap().to_string();
    let path = format!("/v1/sessions/{id}/events?limit=1000");
    let (_, events) = server.call_as("GET", &path, None, Some(KEY)).await;
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "tool_call_finished").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "user_message").count(),
        2,
        "{kinds:?}"
    );
}

async fn request(
    method: reqwest::Method,
    url: &str,
    origin: &str,
    preflight: bool,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .request(method, url)
        .header("origin", origin);
    if preflight {
        request = request
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            );
    }
    request.send().await.unwrap()
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_lets_listed_origins_in_and_no_one_else() {
    let up = Upstream::start(vec![], Reply::text("ok")).await;
    let app = "http://app.example.test:5173";
    let keyed = Stead::start(
        &config(
            &up,
            &format!("api_keys = [\"{KEY}\"]\ncors_origins = [\"{app}\"]"),
        ),
        None,
    );
    let sessions = format!("{}/v1/sessions", keyed.base);

    // A listed origin's preflight is answered before authentication.
    let answer = request(reqwest::Method::OPTIONS, &sessions, app, true).await;
    assert_eq!(answer.status(), 204);
    assert_eq!(header(&answer, "access-control-allow-origin"), Some(app));
    let allowed = header(&answer, "access-control-allow-headers").unwrap();
    assert!(
        allowed.contains("authorization") && allowed.contains("x-api-key"),
        "{allowed}"
    );
    assert!(header(&answer, "access-control-allow-credentials").is_none());
    // Its requests are answered readable, and still need credentials.
    let answer = request(reqwest::Method::GET, &sessions, app, false).await;
    assert_eq!(answer.status(), 401);
    assert_eq!(header(&answer, "access-control-allow-origin"), Some(app));
    assert!(header(&answer, "access-control-expose-headers")
        .unwrap()
        .contains("x-stead-request-id"));
    // Another origin gets no CORS headers: the browser keeps the answer from its page.
    for (method, preflight) in [
        (reqwest::Method::OPTIONS, true),
        (reqwest::Method::GET, false),
    ] {
        let answer = request(method, &sessions, "https://evil.example.test", preflight).await;
        assert!(header(&answer, "access-control-allow-origin").is_none());
        assert_ne!(answer.status(), 204);
    }

    // An open server (no keys) accepts a listed origin's pages, and still refuses others.
    let open = Stead::start(&config(&up, &format!("cors_origins = [\"{app}\"]")), None);
    let health = format!("{}/v1/agents", open.base);
    let answer = request(reqwest::Method::GET, &health, app, false).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(header(&answer, "access-control-allow-origin"), Some(app));
    let answer = request(
        reqwest::Method::GET,
        &health,
        "https://evil.example.test",
        false,
    )
    .await;
    assert_eq!(answer.status(), 403);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "origin_not_allowed");
}

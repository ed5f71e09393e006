//! MCP servers as agent tools (docs/mcp.md), against real MCP servers from npm
//! (`@modelcontextprotocol/server-everything` and `server-filesystem`, tests/fixtures/mcp-servers,
//! installed by scripts/test.sh) over stdio. The client alone (`stead::mcp`): listing, calls,
//! tool errors, a server killed mid-call. Then through the real `stead serve` with the upstream
//! model double: approval parking before an MCP tool, progress frames on the WebSocket, cancel
//! mid-call, the server killed mid-call and restarted, SIGKILL of Stead during an approved
//! non-idempotent call (in doubt, never re-run), `GET /v1/mcp/servers`, `GET /v1/agents`, a
//! server that cannot start, and the decision check over the recorded session.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stead::mcp::{McpServer, McpTool, ServerConfig, Transport};
use stead_actors::policy::ApprovalPolicy;
use stead_actors::tools::{Tool, ToolContext};
use stead_testkit::client::Api;
use stead_testkit::stead::{events, Stead};
use stead_testkit::upstream::{Reply, Upstream};
use uuid::Uuid;

const TIMEOUT: Duration = Duration::from_secs(30);

fn fixture(path: &str) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp-servers/node_modules")
        .join(path);
    assert!(
        script.is_file(),
        "needs `npm ci` in tests/fixtures/mcp-servers (scripts/test.sh runs it)"
    );
    script.display().to_string()
}

fn everything_script() -> String {
    fixture("@modelcontextprotocol/server-everything/dist/index.js")
}

fn everything(marker: &str) -> ServerConfig {
    ServerConfig {
        name: "everything".into(),
        transport: Transport::Stdio {
            command: "node".into(),
            args: vec![everything_script(), "stdio".into()],
            // Lets the test find (and kill) this server's process.
            env: BTreeMap::from([("STEAD_TEST_MARKER".to_string(), marker.to_string())]),
        },
        start_timeout: TIMEOUT,
        call_timeout: TIMEOUT,
    }
}

fn context(call: &str) -> ToolContext {
    ToolContext::new(Uuid::now_v7(), call)
}

fn tool(server: &Arc<McpServer>, name: &str) -> McpTool {
    let remote = server
        .tools()
        .iter()
        .find(|t| t.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("the server lists no `{name}`"));
    McpTool {
        server: server.clone(),
        name: stead::mcp::tools::model_name("everything", name),
        remote,
        approval: ApprovalPolicy::Never,
        idempotent: false,
        max_result_bytes: 1 << 20,
    }
}

/// The pids of processes whose environment holds `STEAD_TEST_MARKER=marker`.
fn marked_processes(marker: &str) -> Vec<i32> {
    let needle = format!("STEAD_TEST_MARKER={marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|&b| b == 0).any(|var| var == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

fn kill_marked(marker: &str) -> Vec<i32> {
    let pids = marked_processes(marker);
    assert_eq!(pids.len(), 1, "{pids:?}");
    // SAFETY: a plain syscall on a pid this test started (through Stead).
    unsafe { libc::kill(pids[0], libc::SIGKILL) };
    pids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_lists_and_runs_its_tools() {
    let marker = Uuid::now_v7().to_string();
    let server = McpServer::connect(everything(&marker)).await.unwrap();
    let tools = server.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for expected in ["echo", "get-sum", "trigger-long-running-operation"] {
        assert!(names.contains(&expected), "{names:?}");
    }
    let echo = tool(&server, "echo");
    assert_eq!(echo.parameters()["properties"]["message"]["type"], "string");
    assert_eq!(
        echo.execute(json!({"message": "hi"}), &context("c1"))
            .await
            .unwrap(),
        json!({"content": [{"type": "text", "text": "Echo: hi"}]})
    );
    let sum = tool(&server, "get-sum");
    let result = sum
        .execute(json!({"a": 2, "b": 3}), &context("c2"))
        .await
        .unwrap();
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains('5'), "{result}");

    // A tool the server does not have, and arguments its schema refuses: tool errors.
    let mut gone = tool(&server, "echo");
    gone.remote.name = "no-such-tool".into();
    let error = gone.execute(json!({}), &context("c3")).await.unwrap_err();
    assert!(error.0.contains("no-such-tool"), "{error}");
    let error = echo
        .execute(json!({"message": 7}), &context("c4"))
        .await
        .unwrap_err();
    assert!(!error.0.is_empty());
    let error = echo
        .execute(json!("not an object"), &context("c5"))
        .await
        .unwrap_err();
    assert!(error.0.contains("JSON object"), "{error}");
    server.stop().await;
    assert!(marked_processes(&marker).is_empty(), "stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_fails_that_call_and_is_started_again() {
    let marker = Uuid::now_v7().to_string();
    let server = McpServer::connect(everything(&marker)).await.unwrap();
    let long = tool(&server, "trigger-long-running-operation");
    let pids = marked_processes(&marker);
    let call = tokio::spawn(async move {
        long.execute(json!({"duration": 20, "steps": 20}), &context("c1"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    let killed = Instant::now();
    kill_marked(&marker);
    let error = call.await.unwrap().unwrap_err();
    assert!(error.0.contains("closed the connection"), "{error}");
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "{:?}",
        killed.elapsed()
    );

    let echo = tool(&server, "echo");
    assert_eq!(
        echo.execute(json!({"message": "again"}), &context("c2"))
            .await
            .unwrap(),
        json!({"content": [{"type": "text", "text": "Echo: again"}]})
    );
    let restarted = marked_processes(&marker);
    assert_eq!(restarted.len(), 1, "{restarted:?}");
    assert_ne!(restarted, pids);
    server.stop().await;
}

/// The model double: a user message `echo X` asks for `everything__echo`, `long N` for the
/// long-running operation (N steps of a second), `files` for the filesystem server's
/// `list_directory`, `ghost` for a tool no server has; a tool result is answered with text
/// naming it.
async fn model() -> Upstream {
    Upstream::respond(|request: &Value| {
        let messages = request["messages"].as_array().expect("messages");
        let last = messages.last().expect("a message");
        if last["role"] == "tool" {
            let content = last["content"].as_str().unwrap_or_default();
            return Reply::text(&format!("Tool said: {content}"));
        }
        let text = last["content"].as_str().unwrap_or_default();
        if let Some(message) = text.strip_prefix("echo ") {
            return Reply::tool("everything__echo", json!({ "message": message }));
        }
        if let Some(steps) = text.strip_prefix("long ") {
            let steps: u64 = steps.parse().unwrap();
            return Reply::tool(
                "everything__trigger-long-running-operation",
                json!({ "duration": steps, "steps": steps }),
            );
        }
        if let Some(dir) = text.strip_prefix("files ") {
            return Reply::tool("files__list_directory", json!({ "path": dir }));
        }
        if text == "ghost" {
            return Reply::tool("everything__no-such-tool", json!({}));
        }
        Reply::text("Hello.")
    })
    .await
}

/// `stead.toml` with the model double, the everything server (marked with `marker`), the
/// filesystem server over `root`, and the `mcp` agent: echo and the `get-*` tools run freely,
/// the long-running operation needs approval (a more specific entry than the `*` one).
fn config(upstream: &Upstream, marker: &str, root: &str) -> String {
    let extra = format!(
        r#"
[[mcp_servers]]
name = "everything"
command = "node"
args = ["{everything}", "stdio"]
env = {{ STEAD_TEST_MARKER = "{marker}" }}

[[mcp_servers]]
name = "files"
command = "node"
args = ["{filesystem}", "{root}"]

[[mcp_servers]]
name = "broken"
command = "/nonexistent/mcp-server"

[[agents]]
name = "mcp"
route = "default"
max_steps = 4

[[agents.tools]]
kind = "mcp"
server = "everything"
tools = ["echo", "get-*", "trigger-*"]

[[agents.tools]]
kind = "mcp"
server = "everything"
tools = ["trigger-long-*"]
approval = "always"

[[agents.tools]]
kind = "mcp"
server = "files"
tools = ["list_directory", "read_*"]

[[agents.tools]]
kind = "mcp"
server = "broken"
"#,
        everything = everything_script(),
        filesystem = fixture("@modelcontextprotocol/server-filesystem/dist/index.js"),
    );
    upstream.config("default", "model = \"m\"", &extra)
}

async fn ready(server: &Stead) -> Value {
    for _ in 0..600 {
        let (status, body) = server.call("GET", "/v1/mcp/servers", None).await;
        assert_eq!(status, 200, "{body}");
        let all = body["servers"].as_array().unwrap();
        if all
            .iter()
            .filter(|s| s["name"] != "broken")
            .all(|s| s["status"] == "ready")
        {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the MCP servers never became ready");
}

fn kinds(frames: &[Value]) -> Vec<String> {
    events(frames)
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_use_mcp_tools_with_approval_progress_and_cancel() {
    let marker = Uuid::now_v7().to_string();
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("notes.txt"), "hello").unwrap();
    let upstream = model().await;
    let root_path = root.path().canonicalize().unwrap().display().to_string();
    let server = Stead::start(&config(&upstream, &marker, &root_path), None);
    let servers = ready(&server).await;

    // Operations: every server with its status, tools and last error; a broken one says why.
    let by_name = |name: &str| {
        servers["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap()
    };
    let everything = by_name("everything");
    assert_eq!(everything["transport"], "stdio");
    assert!(everything["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "echo"));
    let broken = by_name("broken");
    assert_eq!(broken["status"], "restarting", "{broken}");
    assert!(
        broken["last_error"]
            .as_str()
            .unwrap()
            .contains("cannot start the MCP server `broken`"),
        "{broken}"
    );
    let (_, agents) = server.call("GET", "/v1/agents", None).await;
    let agent = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "mcp")
        .unwrap()
        .clone();
    assert_eq!(
        agent["mcp_servers"],
        json!(["everything", "files", "broken"])
    );
    let tools: BTreeMap<String, Value> = agent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_string(), t.clone()))
        .collect();
    assert_eq!(tools["everything__echo"]["approval"], "never");
    assert_eq!(
        tools["everything__trigger-long-running-operation"]["approval"],
        "always"
    );
    assert!(tools.contains_key("files__list_directory"));
    assert!(!tools.contains_key("files__write_file"), "not chosen");

    let (id, token) = server.create("mcp").await;
    let mut ws = server.ws(&id, &token, "").await;

    // A free MCP tool: the model saw the chosen tools (namespaced), the call ran.
    ws.send(json!({"type": "user_message", "text": "echo hi"}))
        .await;
    let frames = ws.until_event("turn_finished").await;
    assert_eq!(
        kinds(&frames),
        [
            "user_message",
            "model_call_started",
            "tools_seen",
            "model_call_finished",
            "tool_call_requested",
            "tool_call_started",
            "tool_call_finished",
            "model_call_started",
            "model_call_finished",
            "assistant_message",
            "turn_finished"
        ]
    );
    let finished = events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "tool_call_finished")
        .unwrap();
    assert_eq!(
        finished["payload"]["result"],
        json!({"content": [{"type": "text", "text": "Echo: hi"}]})
    );
    let seen = events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "tools_seen")
        .unwrap();
    let requests = upstream.requests();
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    let journaled: Vec<&str> = seen["payload"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, journaled, "the model saw the journaled list");
    assert!(offered.contains(&"everything__echo"), "{offered:?}");
    assert!(
        offered.contains(&"files__read_text_file") || offered.contains(&"files__read_file"),
        "{offered:?}"
    );
    assert!(!offered.contains(&"files__write_file"), "{offered:?}");

    // The long-running tool parks on approval; once approved its progress reaches the client.
    ws.send(json!({"type": "user_message", "text": "long 3"}))
        .await;
    let frames = ws.until_event("approval_requested").await;
    let call_id = events(&frames).last().unwrap()["payload"]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.send(json!({"type": "approval", "call_id": call_id, "approved": true}))
        .await;
    let frames = ws.until_event("turn_finished").await;
    let progress: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "tool_progress")
        .collect();
    assert!(progress.len() >= 2, "{frames:?}");
    assert!(progress.iter().all(|p| p["call_id"] == call_id.as_str()));
    assert_eq!(progress.last().unwrap()["total"], json!(3.0));
    let started = frames
        .iter()
        .position(|f| f["kind"] == "tool_call_started")
        .unwrap();
    let ended = frames
        .iter()
        .position(|f| f["kind"] == "tool_call_finished")
        .unwrap();
    let first = frames
        .iter()
        .position(|f| f["type"] == "tool_progress")
        .unwrap();
    assert!(started < first && first < ended, "{frames:?}");

    // Cancel mid-call: the call is journaled as cancelled, the turn ends, the server lives on.
    ws.send(json!({"type": "user_message", "text": "long 30"}))
        .await;
    let frames = ws.until_event("approval_requested").await;
    let call_id = events(&frames).last().unwrap()["payload"]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.send(json!({"type": "approval", "call_id": call_id, "approved": true}))
        .await;
    loop {
        let frame = ws.next().await.unwrap();
        if frame["type"] == "tool_progress" {
            break;
        }
    }
    // A client that attaches now is sent the latest progress of the running call.
    let mut late = server.ws(&id, &token, "").await;
    let hello = late.next().await.unwrap();
    assert_eq!(hello["type"], "hello");
    let mut seen_progress = false;
    for _ in 0..3 {
        let frame = late.next().await.unwrap();
        if frame["type"] == "tool_progress" && frame["call_id"] == call_id.as_str() {
            seen_progress = true;
            break;
        }
    }
    assert!(seen_progress, "the latest progress on attach");
    ws.send(json!({"type": "cancel"})).await;
    let frames = ws.until_event("turn_cancelled").await;
    let cancelled = events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "tool_call_cancelled")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert_eq!(cancelled["payload"]["call_id"], call_id.as_str());

    // The server killed mid-call: that call fails clearly; the restarted server serves the next.
    ws.send(json!({"type": "user_message", "text": "long 30"}))
        .await;
    let frames = ws.until_event("approval_requested").await;
    let call_id = events(&frames).last().unwrap()["payload"]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.send(json!({"type": "approval", "call_id": call_id, "approved": true}))
        .await;
    ws.until_event("tool_call_started").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill_marked(&marker);
    let frames = ws.until_event("turn_finished").await;
    let failed = events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "tool_call_failed")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert!(
        failed["payload"]["error"]
            .as_str()
            .unwrap()
            .contains("closed the connection"),
        "{failed}"
    );
    ws.send(json!({"type": "user_message", "text": "echo back"}))
        .await;
    let frames = ws.until_event("turn_finished").await;
    let finished = events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "tool_call_finished")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert_eq!(
        finished["payload"]["result"]["content"][0]["text"],
        "Echo: back"
    );

    // A tool the server does not have: a tool error for the model, not a crash.
    ws.send(json!({"type": "user_message", "text": "ghost"}))
        .await;
    let frames = ws.until_event("turn_finished").await;
    let failed = events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "tool_call_failed")
        .unwrap();
    assert!(failed["payload"]["error"]
        .as_str()
        .unwrap()
        .contains("unknown tool"));

    // The filesystem server from npm: its directory listing reaches the model.
    ws.send(json!({"type": "user_message", "text": format!("files {root_path}")}))
        .await;
    let frames = ws.until_event("turn_finished").await;
    let finished = events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "tool_call_finished")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert!(
        finished["payload"]["result"]
            .to_string()
            .contains("notes.txt"),
        "{finished}"
    );

    // Metrics per server.
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("stead_mcp_server_up{server=\"everything\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("stead_mcp_calls_total{server=\"everything\"}"));

    // The decision check replays the session from its journal alone (no server running).
    let data = server.kill();
    let check = stead_testkit::stead::command()
        .current_dir(data.path())
        .args([
            "replay",
            "check",
            &id,
            "--config",
            "stead.toml",
            "--data-dir",
        ])
        .arg(data.path())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_an_approved_mcp_call_leaves_it_in_doubt_never_rerun() {
    let marker = Uuid::now_v7().to_string();
    let root = tempfile::tempdir().unwrap();
    let upstream = model().await;
    let root_path = root.path().canonicalize().unwrap().display().to_string();
    let config = config(&upstream, &marker, &root_path);
    let server = Stead::start(&config, None);
    ready(&server).await;
    let (id, token) = server.create("mcp").await;
    let mut ws = server.ws(&id, &token, "").await;
    ws.send(json!({"type": "user_message", "text": "long 30"}))
        .await;
    let frames = ws.until_event("approval_requested").await;
    let call_id = events(&frames).last().unwrap()["payload"]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.send(json!({"type": "approval", "call_id": call_id, "approved": true}))
        .await;
    loop {
        if ws.next().await.unwrap()["type"] == "tool_progress" {
            break;
        }
    }
    let data = server.kill();
    let server = Stead::start_in(data, &config, None);
    server.wait_for_status(&id, "idle").await;
    let journal = server.journal(&id).await;
    let of_call: Vec<&Value> = journal
        .iter()
        .filter(|e| e["payload"]["call_id"] == call_id.as_str())
        .collect();
    let kinds: Vec<&str> = of_call
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "tool_call_requested",
            "approval_requested",
            "approval_decided",
            "tool_call_started",
            "tool_call_failed"
        ]
    );
    assert_eq!(of_call[4]["payload"]["in_doubt"], true);
    assert!(of_call[4]["payload"]["error"]
        .as_str()
        .unwrap()
        .contains("Ask the user"));
    // The model was told, and answered the user (asking them).
    let last = upstream.requests().last().unwrap().clone();
    assert!(last["messages"].to_string().contains("in doubt"), "{last}");
}

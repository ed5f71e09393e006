//! The MCP client (`src/mcp.rs`) against a real MCP server from npm over stdio:
//! `@modelcontextprotocol/server-everything` (tests/fixtures/mcp-servers, installed by
//! scripts/test.sh). Lists its tools, calls them as Stead tools, turns an unknown tool into a
//! tool error, and survives the server being killed mid-call: that call fails clearly and the
//! next one runs on a server started again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use stead::mcp::{McpServer, McpTool, StdioServer};
use stead_actors::policy::ApprovalPolicy;
use stead_actors::tools::{Tool, ToolContext};
use uuid::Uuid;

const TIMEOUT: Duration = Duration::from_secs(30);

fn everything(marker: &str) -> StdioServer {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        script.is_file(),
        "needs `npm ci` in tests/fixtures/mcp-servers (scripts/test.sh runs it)"
    );
    StdioServer {
        name: "everything".into(),
        command: "node".into(),
        args: vec![script.display().to_string(), "stdio".into()],
        // Lets the test find (and kill) this server's process.
        env: BTreeMap::from([("STEAD_TEST_MARKER".to_string(), marker.to_string())]),
    }
}

fn context(call: &str) -> ToolContext {
    let session_id = Uuid::now_v7();
    ToolContext {
        session_id,
        call_id: call.into(),
        idempotency_key: format!("{session_id}:{call}"),
    }
}

async fn tool(server: &Arc<McpServer>, name: &str) -> McpTool {
    let remote = server
        .tools(TIMEOUT)
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("the server lists no `{name}`"));
    McpTool {
        server: server.clone(),
        name: format!("everything__{name}"),
        remote,
        approval: ApprovalPolicy::Never,
        idempotent: false,
        timeout: TIMEOUT,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_lists_and_runs_its_tools() {
    let marker = Uuid::now_v7().to_string();
    let server = McpServer::connect(everything(&marker), TIMEOUT)
        .await
        .unwrap();
    let tools = server.tools(TIMEOUT).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for expected in ["echo", "get-sum", "trigger-long-running-operation"] {
        assert!(names.contains(&expected), "{names:?}");
    }
    let echo = tool(&server, "echo").await;
    assert_eq!(echo.parameters()["properties"]["message"]["type"], "string");
    assert_eq!(
        echo.execute(json!({"message": "hi"}), &context("c1"))
            .await
            .unwrap(),
        json!({"content": [{"type": "text", "text": "Echo: hi"}]})
    );
    let sum = tool(&server, "get-sum").await;
    let result = sum
        .execute(json!({"a": 2, "b": 3}), &context("c2"))
        .await
        .unwrap();
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains('5'), "{result}");

    // A tool the server does not have, and arguments its schema refuses: tool errors.
    let mut gone = tool(&server, "echo").await;
    gone.remote.name = "no-such-tool".into();
    let error = gone.execute(json!({}), &context("c3")).await.unwrap_err();
    assert!(!error.0.is_empty());
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_fails_that_call_and_is_started_again() {
    let marker = Uuid::now_v7().to_string();
    let server = McpServer::connect(everything(&marker), TIMEOUT)
        .await
        .unwrap();
    let long = tool(&server, "trigger-long-running-operation").await;
    let pids = marked_processes(&marker);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let call = tokio::spawn(async move {
        long.execute(json!({"duration": 20, "steps": 20}), &context("c1"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    let killed = Instant::now();
    unsafe { libc::kill(pids[0], libc::SIGKILL) };
    let error = call.await.unwrap().unwrap_err();
    assert!(error.0.contains("closed the connection"), "{error}");
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "{:?}",
        killed.elapsed()
    );

    let echo = tool(&server, "echo").await;
    assert_eq!(
        echo.execute(json!({"message": "again"}), &context("c2"))
            .await
            .unwrap(),
        json!({"content": [{"type": "text", "text": "Echo: again"}]})
    );
    let restarted = marked_processes(&marker);
    assert_eq!(restarted.len(), 1, "{restarted:?}");
    assert_ne!(restarted, pids);
}

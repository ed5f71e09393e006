//! The MCP client alone (`stead_agents::mcp::McpServer`) against server-everything over stdio: listing,
//! calls, tool errors, a server killed mid-call and started again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use stead_actors::policy::ApprovalPolicy;
use stead_actors::tools::{Tool, ToolContext};
use stead_agents::mcp::{McpServer, McpTool, ServerConfig, Transport};
use uuid::Uuid;

use super::{everything_script, kill_marked, marked_processes, TIMEOUT};

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
        name: stead_agents::mcp::tools::model_name("everything", name),
        remote,
        approval: ApprovalPolicy::Never,
        idempotent: false,
        max_result_bytes: 1 << 20,
    }
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

    // The child's environment is clean (it inherited Stead's, provider keys and
    // all): PATH and the entry's own `env`, none of the test process's other variables.
    let env = tool(&server, "get-env")
        .execute(json!({}), &context("c6"))
        .await
        .unwrap();
    let env: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(env["content"][0]["text"].as_str().unwrap()).unwrap();
    assert!(env.contains_key("PATH"), "{env:?}");
    assert_eq!(env["STEAD_TEST_MARKER"], marker.as_str());
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let leaked: Vec<&String> = env
        .keys()
        .filter(|k| std::env::var_os(k).is_some())
        .filter(|k| !stead_agents::mcp::server::INHERITED_ENV.contains(&k.as_str()))
        .filter(|k| *k != "STEAD_TEST_MARKER")
        .collect();
    assert!(leaked.is_empty(), "inherited from Stead: {leaked:?}");
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

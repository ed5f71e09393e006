//! The official Python SDK (`mcp` on PyPI) on both sides: a Streamable HTTP server Stead uses,
//! with progress; and a client of Stead's own `/mcp` endpoint.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::{events, Stead};

use super::{model, ready};

fn mcp_python() -> String {
    std::env::var("MCP_PYTHON")
        .expect("needs MCP_PYTHON (scripts/test.sh installs the official `mcp` package from PyPI)")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when the test ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_server_over_streamable_http_runs_with_progress() {
    let port = free_port();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp-servers/python_server.py");
    let _server = Killed(
        std::process::Command::new(mcp_python())
            .arg(&script)
            .arg(port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the Python MCP server did not listen"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let upstream = model().await;
    let extra = format!(
        r#"
[[mcp_servers]]
name = "py"
url = "http://127.0.0.1:{port}/mcp"
headers_env = {{ "X-Test-Token" = "PY_MCP_TEST_TOKEN" }}

[[agents]]
name = "py"
route = "default"

[[agents.tools]]
kind = "mcp"
server = "py"
"#
    );
    let server = Stead::start_with_env(
        tempfile::tempdir().unwrap(),
        &upstream.config("default", "model = \"m\"", &extra),
        None,
        &[("PY_MCP_TEST_TOKEN", "secret-value")],
    );
    let servers = ready(&server).await;
    let py = &servers["servers"][0];
    assert_eq!(py["transport"], "http");
    let names: Vec<&str> = py["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["add", "slow_count", "grow"]);

    let (id, token) = server.create("py").await;
    let mut ws = server.ws(&id, &token, "").await;
    ws.send(json!({"type": "user_message", "text": "count 4"}))
        .await;
    let frames = ws.until_event("turn_finished").await;
    let messages: Vec<&str> = frames
        .iter()
        .filter(|f| f["type"] == "tool_progress")
        .filter_map(|f| f["message"].as_str())
        .collect();
    assert!(messages.contains(&"step 4 of 4"), "{frames:?}");
    let finished = events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "tool_call_finished")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert_eq!(
        finished["payload"]["result"]["structured"],
        json!({"result": "counted to 4"}),
        "{finished}"
    );

    // The server adds a tool and says so: Stead lists again, and the next model call sees it
    // (journaled as a new `tools_seen` before that call: in this turn or the next, as the
    // relisting and the turn race).
    ws.send(json!({"type": "user_message", "text": "grow"}))
        .await;
    ws.until_event("turn_finished").await;
    let mut listed = false;
    for _ in 0..100 {
        let (_, agents) = server.call("GET", "/v1/agents", None).await;
        if agents.to_string().contains("py__triple") {
            listed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listed, "the new tool was never listed");
    ws.send(json!({"type": "user_message", "text": "hello"}))
        .await;
    ws.until_event("turn_finished").await;
    let journal = server.journal(&id).await;
    let lists: Vec<Vec<&str>> = journal
        .iter()
        .filter(|e| e["kind"] == "tools_seen")
        .map(|e| {
            e["payload"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(
        lists,
        [
            vec!["py__add", "py__slow_count", "py__grow"],
            vec!["py__add", "py__slow_count", "py__grow", "py__triple"]
        ]
    );
    let requests = upstream.requests();
    let offered: Vec<&str> = requests.last().unwrap()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"py__triple"), "{offered:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_drives_stead_through_its_mcp_endpoint() {
    let fake = stead_testkit::ops::upstream().await;
    let (hook_url, hook) = stead_testkit::ops::webhook().await;
    let server = Stead::start(
        &stead_testkit::ops::config(&fake.base_url, &hook_url, ""),
        None,
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/mcp_client.py");
    let output = tokio::process::Command::new(mcp_python())
        .arg(&script)
        .arg(&server.base)
        .arg("ops")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let id = last["session"].as_str().unwrap();
    server.wait_for_status(id, "idle").await;
    let journal = server.journal(id).await;
    let decided = journal
        .iter()
        .find(|e| e["kind"] == "approval_decided")
        .unwrap();
    assert_eq!(decided["payload"]["approved"], true);
    assert_eq!(decided["payload"]["decided_by"], "local", "who decided");
    assert_eq!(decided["payload"]["reason"], "via MCP");
    assert_eq!(hook.keys().len(), 1, "the approved tool ran once");
    assert!(journal.iter().any(|e| e["kind"] == "assistant_message"));
}

//! MCP servers as agent tools (docs/mcp.md), against real MCP servers from npm
//! (`@modelcontextprotocol/server-everything` and `server-filesystem`, tests/fixtures/mcp-servers,
//! installed by scripts/test.sh) over stdio. The client alone (`stead_agents::mcp`): listing, calls,
//! tool errors, a server killed mid-call. Then through the real `stead serve` with the upstream
//! model double: approval parking before an MCP tool, progress frames on the WebSocket, cancel
//! mid-call, the server killed mid-call and restarted, SIGKILL of Stead during an approved
//! non-idempotent call (in doubt, never re-run), `GET /v1/mcp/servers`, `GET /v1/agents`, a
//! server that cannot start, and the decision check over the recorded session. A Python server
//! on the official SDK (`mcp` on PyPI) over Streamable HTTP; and Stead's own `/mcp` endpoint
//! driven by the official Python client (`MCP_PYTHON`, installed by scripts/test.sh).

mod browser;
mod client;
mod edge;
mod files;
mod python;
mod serve;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::{events, Stead};
use stead_testkit::upstream::{Reply, Upstream};

pub(super) const TIMEOUT: Duration = Duration::from_secs(30);

pub(super) fn fixture(path: &str) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp-servers/node_modules")
        .join(path);
    assert!(
        script.is_file(),
        "needs `npm ci` in tests/fixtures/mcp-servers (scripts/test.sh runs it)"
    );
    script.display().to_string()
}

pub(super) fn everything_script() -> String {
    fixture("@modelcontextprotocol/server-everything/dist/index.js")
}

/// The pids of processes whose environment holds `STEAD_TEST_MARKER=marker`.
pub(super) fn marked_processes(marker: &str) -> Vec<i32> {
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

pub(super) fn kill_marked(marker: &str) -> Vec<i32> {
    let pids = marked_processes(marker);
    assert_eq!(pids.len(), 1, "{pids:?}");
    // SAFETY: a plain syscall on a pid this test started (through Stead).
    unsafe { libc::kill(pids[0], libc::SIGKILL) };
    pids
}

/// The model double: a user message `echo X` asks for `everything__echo`, `long N` for the
/// long-running operation (N steps of a second), `files` for the filesystem server's
/// `list_directory`, `ghost` for a tool no server has; a tool result is answered with text
/// naming it.
pub(super) async fn model() -> Upstream {
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
        if let Some(n) = text.strip_prefix("count ") {
            let n: u64 = n.parse().unwrap();
            return Reply::tool("py__slow_count", json!({ "n": n }));
        }
        if text == "grow" {
            return Reply::tool("py__grow", json!({}));
        }
        if text == "tiny image" {
            return Reply::tool("everything__get-tiny-image", json!({}));
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
pub(super) fn config(upstream: &Upstream, marker: &str, root: &str) -> String {
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

[[mcp_servers]]
name = "broken-garbage"
command = "sh"
args = ["-c", "echo 'this is not JSON-RPC'; echo '{{\"jsonrpc\": 7}}'; exec cat >/dev/null"]
start_timeout_secs = 2

[[mcp_servers]]
name = "broken-hang"
command = "sleep"
args = ["600"]
start_timeout_secs = 2

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

pub(super) async fn ready(server: &Stead) -> Value {
    for _ in 0..600 {
        let (status, body) = server.call("GET", "/v1/mcp/servers", None).await;
        assert_eq!(status, 200, "{body}");
        let all = body["servers"].as_array().unwrap();
        if all
            .iter()
            .filter(|s| !s["name"].as_str().unwrap().starts_with("broken"))
            .all(|s| s["status"] == "ready")
        {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the MCP servers never became ready");
}

pub(super) fn kinds(frames: &[Value]) -> Vec<String> {
    events(frames)
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

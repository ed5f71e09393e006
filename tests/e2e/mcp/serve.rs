//! MCP tools through the real `stead serve` with the model double: operations, approval,
//! progress, cancel, a server killed mid-call, unknown tools, the filesystem server, metrics, the
//! decision check, and a SIGKILL of Stead during an approved non-idempotent call.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::{events, Stead, Ws};
use uuid::Uuid;

use super::{config, kill_marked, kinds, model, ready};

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
    // A server that answers garbage and one that hangs: each fails its start within its
    // timeout, says why, and is tried again; the others are unaffected.
    for name in ["broken-garbage", "broken-hang"] {
        let mut report = by_name(name);
        for _ in 0..100 {
            if report["last_error"].is_string() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (_, now) = server.call("GET", "/v1/mcp/servers", None).await;
            report = now["servers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["name"] == name)
                .cloned()
                .unwrap();
        }
        assert_ne!(report["status"], "ready", "{report}");
        let error = report["last_error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("the MCP server `{name}`")),
            "{report}"
        );
    }
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
    let call_id = approve_long(&mut ws, "long 3").await;
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
    let call_id = approve_long(&mut ws, "long 30").await;
    until_progress(&mut ws).await;
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
    approve_long(&mut ws, "long 30").await;
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
    let call_id = approve_long(&mut ws, "long 30").await;
    until_progress(&mut ws).await;
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

/// Asks for the approval-gated long-running tool (`long N`), approves the call, and returns
/// its id.
async fn approve_long(ws: &mut Ws, text: &str) -> String {
    ws.send(json!({"type": "user_message", "text": text})).await;
    let frames = ws.until_event("approval_requested").await;
    let call_id = events(&frames).last().unwrap()["payload"]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.send(json!({"type": "approval", "call_id": call_id, "approved": true}))
        .await;
    call_id
}

/// Reads frames until the first `tool_progress`.
async fn until_progress(ws: &mut Ws) {
    while ws.next().await.unwrap()["type"] != "tool_progress" {}
}

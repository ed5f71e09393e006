//! Replay debugging through the real binary: `stead session …` and `stead replay …` against the
//! database of a running `stead serve`, whose sessions are recorded with a scripted upstream
//! model (a test double) and the built-in demo agent (its `forget` tool always needs approval).
//! By topic: export and import (`export`), the decision check, forks and the recorded fixtures
//! (`check`), and commands on a live server: tail and compaction (`live`).

mod check;
mod export;
mod live;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

/// The demo agent on the upstream double: route `default` → model `m-default`, and a second
/// route `alt` → `m-alt` for forks.
fn config(upstream: &Upstream, extra: &str) -> String {
    upstream.config(
        "default",
        "model = \"m-default\"",
        &format!(
            "[[routes]]\nname = \"alt\"\ntargets = [{{ provider = \"up\", model = \"m-alt\" }}]\n\n{extra}"
        ),
    )
}

async fn upstream() -> Upstream {
    Upstream::start(Vec::new(), Reply::text("All done.")).await
}

/// Runs `stead ARGS` on the server's data directory, configuration and database.
fn cli(server: &Stead, database_url: Option<&str>, args: &[&str]) -> Output {
    cli_with(server.data.path(), "stead.toml", database_url, args)
}

fn cli_with(data: &Path, config: &str, database_url: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = stead_testkit::stead::command();
    if let Some(url) = database_url {
        cmd.env("DATABASE_URL", url);
    }
    cmd.current_dir(data)
        .args(["--config", config, "--data-dir"])
        .arg(data)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run stead")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn ok(output: Output) -> Output {
    assert!(
        output.status.success(),
        "stead failed ({}): {}{}",
        output.status,
        stderr(&output),
        stdout(&output)
    );
    output
}

async fn post(server: &Stead, path: &str, body: Value) -> Value {
    let (status, body) = server.call("POST", path, Some(body)).await;
    assert!((200..300).contains(&status), "{path}: {status} {body}");
    body
}

/// Records a session: a turn whose `forget` call is approved, then a plain text turn.
async fn record(server: &Stead, upstream: &Upstream) -> String {
    let (id, _) = server.create("demo").await;
    upstream.push([
        Reply::Tool {
            name: "forget".into(),
            arguments: json!({ "op": "remove", "old": "draft" }),
        },
        Reply::text("I forgot the draft."),
        Reply::text("Hello again."),
    ]);
    let parked = post(
        server,
        &format!("/v1/sessions/{id}/messages?wait=true"),
        json!({ "text": "forget my draft" }),
    )
    .await;
    assert_eq!(parked["status"], "awaiting_approval", "{parked}");
    let call_id = parked["pending_approvals"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    post(
        server,
        &format!("/v1/sessions/{id}/approvals/{call_id}"),
        json!({ "approved": true, "reason": "fine" }),
    )
    .await;
    server.wait_for_status(&id, "idle").await;
    let done = post(
        server,
        &format!("/v1/sessions/{id}/messages?wait=true"),
        json!({ "text": "hello" }),
    )
    .await;
    assert_eq!(done["status"], "idle", "{done}");
    id
}

fn seq_of(journal: &[Value], kind: &str) -> i64 {
    journal
        .iter()
        .find(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {journal:?}"))["seq"]
        .as_i64()
        .unwrap()
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

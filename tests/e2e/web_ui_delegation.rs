//! Sub-agents in a real browser: `web-ui/e2e/delegation.mjs` drives Debian's Chromium against a
//! running `stead serve` whose model is an upstream double answering per agent (by system
//! prompt): the coordinator's one answer delegates to two child agents at once; the page shows
//! a card per child session (status, latest line, a link); the writer child's approval appears
//! on the coordinator's page and is approved there; both replies come back. Screenshots go to
//! `{target}/tmp/web-ui-screenshots/` beside the main browser test's.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use stead_testkit::external;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

/// What the double answers: by the agent's system prompt and this turn's tool results.
fn reply(request: &Value) -> Reply {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let system = messages
        .first()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    let turn = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .map_or(0, |at| at + 1);
    let results = messages[turn..]
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    match system.as_str() {
        "You research." => Reply::text("Rayleigh scattering makes the sky blue."),
        "You write." if results == 0 => Reply::tool("clock", json!({})),
        "You write." => Reply::text("A blue line, written at noon."),
        _ if results >= 2 => {
            Reply::text("Both sub-agents answered: the sky is explained and the line is written.")
        }
        _ => Reply::Tools(vec![
            ("research".into(), json!({"task": "Why is the sky blue?"})),
            (
                "write".into(),
                json!({"task": "Write a line about the sky."}),
            ),
        ]),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_shows_a_delegation_tree() {
    let web_ui = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web-ui");
    assert!(
        web_ui.join("../node_modules/playwright-core").is_dir(),
        "needs `npm ci` at the repository root (scripts/build-web-ui.sh runs it)"
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let up = Upstream::respond(reply).await;
    let config = up.config(
        "default",
        r#"model = "double""#,
        r#"[[agents]]
name = "lead"
route = "default"
system_prompt = "You coordinate."

[[agents.tools]]
name = "research"
kind = "agent"
agent = "researcher"

[[agents.tools]]
name = "write"
kind = "agent"
agent = "writer"

[[agents]]
name = "researcher"
route = "default"
system_prompt = "You research."

[[agents]]
name = "writer"
route = "default"
system_prompt = "You write."

[[agents.tools]]
name = "clock"
kind = "clock"
approval = "always"
"#,
    );
    let server = Stead::start(&config, None);
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-screenshots");
    std::fs::create_dir_all(&out).unwrap();
    let _ = std::fs::remove_file(out.join("10-delegation.png"));
    let mut command = Command::new("node");
    command
        .current_dir(&web_ui)
        .arg("e2e/delegation.mjs")
        .arg(&server.base)
        .arg(&out)
        .env("CHROMIUM", &chromium);
    let stdout = external::run(command, Duration::from_secs(180), "the browser run failed")
        .await
        .stdout;
    assert!(stdout.contains(r#"{"done":true}"#), "{stdout}");
    for shot in ["10-delegation", "11-delegation-finished"] {
        assert!(
            out.join(format!("{shot}.png")).is_file(),
            "screenshot {shot}"
        );
    }
}

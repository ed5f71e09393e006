//! The demo flow on the default model (Qwen2.5-Coder-0.5B-Instruct, prepared by `stead setup`)
//! in a real browser: `web-ui/e2e/demo.mjs` drives Debian's Chromium against `stead serve` with
//! its built-in configuration — remember a note, ask to forget it, approve the approval card,
//! see the note deleted. The model decides by itself to call both tools. Screenshots go to
//! `{target}/tmp/web-ui-demo/`; afterwards the journal is checked for what the page showed.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use stead_testkit::client::Api;
use stead_testkit::external;
use stead_testkit::stead::{prepared_data_dir, Stead};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_agent_forgets_a_note_after_approval_in_a_real_browser() {
    let web_ui = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web-ui");
    assert!(
        web_ui.join("../node_modules/playwright-core").is_dir(),
        "needs `npm ci` at the repository root (scripts/build-web-ui.sh runs it)"
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let server = Stead::start_in(prepared_data_dir(), "", None);
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-demo");
    let _ = std::fs::remove_dir_all(&out);
    let mut command = Command::new("node");
    command
        .current_dir(&web_ui)
        .arg("e2e/demo.mjs")
        .arg(&server.base)
        .arg(&out)
        .env("CHROMIUM", &chromium);
    let stdout = external::run(command, Duration::from_secs(480), "the browser run failed")
        .await
        .stdout;
    let done: serde_json::Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .find(|v: &serde_json::Value| v["done"] == true)
        .unwrap_or_else(|| panic!("the flow did not finish: {stdout}"));
    for shot in [
        "demo-1-remembered",
        "demo-2-approval-card",
        "demo-3-forgotten",
    ] {
        assert!(
            out.join(format!("{shot}.png")).is_file(),
            "screenshot {shot}"
        );
    }

    // The journal holds what the page showed: the model called remember, then forget; forget
    // waited for a person's approval; its result deleted the note remember had stored.
    let journal = server.journal(done["session"].as_str().unwrap()).await;
    let of = |kind: &str| -> Vec<&serde_json::Value> {
        journal.iter().filter(|e| e["kind"] == kind).collect()
    };
    let requested: Vec<&str> = of("tool_call_requested")
        .iter()
        .map(|e| e["payload"]["tool"].as_str().unwrap())
        .collect();
    assert_eq!(requested, ["remember", "forget"], "{journal:#?}");
    assert_eq!(of("approval_requested").len(), 1);
    assert_eq!(of("approval_decided")[0]["payload"]["approved"], true);
    let results = of("tool_call_finished");
    let stored = &results[0]["payload"]["result"]["key"];
    let deleted = &results[1]["payload"]["result"];
    assert_eq!(
        &deleted["key"], stored,
        "forget named the note remember stored"
    );
    assert_eq!(deleted["deleted"], true);
    eprintln!("screenshots: {}", out.display());
}

//! The web UI with MCP tools in a real browser (`web-ui/e2e/mcp.mjs`, Debian's Chromium through
//! playwright-core): the approval card of an MCP tool, its progress bar growing, the result, and
//! "Send now (interrupt)" cancelling a running MCP call, and a tool's image (kept as an artifact)
//! shown in its card.
//! Screenshots go to `{target}/tmp/web-ui-screenshots/mcp/`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use stead_testkit::external;
use stead_testkit::stead::Stead;
use uuid::Uuid;

use super::{config, model, ready};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_shows_mcp_tools_with_progress_bars() {
    let web_ui = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web-ui");
    assert!(
        web_ui.join("../node_modules/playwright-core").is_dir(),
        "needs `npm ci` at the repository root (scripts/build-web-ui.sh runs it)"
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let root = tempfile::tempdir().unwrap();
    let upstream = model().await;
    let marker = Uuid::now_v7().to_string();
    let server = Stead::start(
        &config(
            &upstream,
            &marker,
            &root.path().canonicalize().unwrap().display().to_string(),
        ),
        None,
    );
    ready(&server).await;
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-screenshots/mcp");
    let _ = std::fs::remove_dir_all(&out);
    let mut command = Command::new("node");
    command
        .current_dir(&web_ui)
        .arg("e2e/mcp.mjs")
        .arg(&server.base)
        .arg(&out)
        .arg("mcp")
        .env("CHROMIUM", &chromium);
    let stdout = external::run(command, Duration::from_secs(180), "the browser run failed")
        .await
        .stdout;
    assert!(stdout.contains(r#"{"done":true}"#), "{stdout}");
    for shot in [
        "mcp-1-approval",
        "mcp-2-progress",
        "mcp-3-finished",
        "mcp-4-interrupted",
        "mcp-5-tool-image",
    ] {
        assert!(
            out.join(format!("{shot}.png")).is_file(),
            "screenshot {shot}"
        );
    }
    eprintln!("screenshots: {}", out.display());
}

//! The web UI in a real browser: `web-ui/e2e/e2e.mjs` drives Debian's Chromium (through
//! `playwright-core`, no browser download) against a running `stead serve` whose model is a
//! scripted upstream double: sessions, streamed chat, an approval card decided in a second tab,
//! the tool result, a session's schedules (listed, one cancelled), the replay slider, a fork,
//! the gateway log. Screenshots of each page go to
//! `{target}/tmp/web-ui-screenshots/`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use stead_testkit::external;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_works_in_a_real_browser() {
    let web_ui = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web-ui");
    assert!(
        web_ui.join("../node_modules/playwright-core").is_dir(),
        "needs `npm ci` at the repository root (scripts/build-web-ui.sh runs it)"
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        std::path::Path::new(&chromium).is_file(),
        "needs Chromium at {chromium} (Debian package `chromium`; scripts/test.sh installs it)"
    );
    let up = Upstream::start(
        vec![
            Reply::Text {
                text: "The weather is sunny and mild today.".into(),
                delay: Duration::ZERO,
                chunk_delay: Duration::from_millis(150),
                completion_tokens: 7,
            },
            Reply::Tool {
                name: "clock".into(),
                arguments: json!({}),
            },
            Reply::text("It is noon."),
        ],
        Reply::text("A forked answer."),
    )
    .await;
    let config = up.config(
        "default",
        r#"model = "double""#,
        r#"[[agents]]
name = "ops"
route = "default"
system_prompt = "You are an operations assistant."

[[agents.tools]]
name = "clock"
kind = "clock"
approval = "always"
"#,
    );
    let server = Stead::start(&config, None);
    let index = reqwest::get(format!("{}/", server.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        index.contains(r#"<div id="root">"#),
        "this binary was built without the web UI (npm run build in web-ui/ first): {index}"
    );
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-screenshots");
    let _ = std::fs::remove_dir_all(&out);
    let mut command = Command::new("node");
    command
        .current_dir(&web_ui)
        .arg("e2e/e2e.mjs")
        .arg(&server.base)
        .arg(&out)
        .env("CHROMIUM", &chromium);
    let stdout = external::run(command, Duration::from_secs(300), "the browser run failed")
        .await
        .stdout;
    assert!(stdout.contains(r#"{"done":true}"#), "{stdout}");
    for shot in [
        "1-sessions",
        "2-streamed",
        "3-approval-card",
        "4-approved-in-another-tab",
        "5-replay",
        "6-fork",
        "7-gateway-log",
        "8-phone-sessions",
        "9-schedules",
    ] {
        assert!(
            out.join(format!("{shot}.png")).is_file(),
            "screenshot {shot}"
        );
    }
    eprintln!("screenshots: {}", out.display());
}

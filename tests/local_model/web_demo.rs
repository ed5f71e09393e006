//! The demo flow on the default model (Qwen2.5-Coder-0.5B-Instruct, prepared by `stead setup`)
//! in a real browser: `web-ui/e2e/demo.mjs` drives Debian's Chromium against `stead serve` with
//! its built-in configuration — a greeting (answered without a tool), remember a note (kept in the session's memory block), a
//! calculation, ask to forget the note and reject the approval card, ask again and approve
//! it. The model decides by itself to call the
//! tools, and after each result it answers in a sentence (never call JSON, never an
//! empty bubble). Screenshots go to `{target}/tmp/web-ui-demo/`; afterwards the journal is
//! checked for what the page showed.

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
        "demo-0-greeted",
        "demo-1-remembered",
        "demo-2-calculated",
        "demo-3-approval-card",
        "demo-4-rejected",
        "demo-5-forgotten",
    ] {
        assert!(
            out.join(format!("{shot}.png")).is_file(),
            "screenshot {shot}"
        );
    }

    // The journal holds what the page showed: no tool for the greeting; the model called remember, the calculator, then
    // forget twice; each forget waited for a person (rejected, then approved); the approved one
    // deleted the line remember had saved, and the memory block is empty again.
    let journal = server.journal(done["session"].as_str().unwrap()).await;
    let of = |kind: &str| -> Vec<&serde_json::Value> {
        journal.iter().filter(|e| e["kind"] == kind).collect()
    };
    let requested: Vec<&str> = of("tool_call_requested")
        .iter()
        .map(|e| e["payload"]["tool"].as_str().unwrap())
        .collect();
    assert_eq!(
        requested,
        ["remember", "calculator", "forget", "forget"],
        "{journal:#?}"
    );
    let decided: Vec<&serde_json::Value> = of("approval_decided")
        .iter()
        .map(|e| &e["payload"]["approved"])
        .collect();
    assert_eq!(decided, [false, true]);
    let results = of("tool_call_finished");
    let saved = &results[0]["payload"]["result"]["saved"];
    assert!(
        saved.as_str().is_some_and(|l| l.contains("hunter2")),
        "{journal:#?}"
    );
    assert_eq!(
        &results[2]["payload"]["result"]["deleted"], saved,
        "forget deleted the line remember saved"
    );
    let memory: Vec<&serde_json::Value> = of("memory_updated")
        .iter()
        .map(|e| &e["payload"]["text"])
        .collect();
    assert_eq!(memory, [saved, &serde_json::json!("")]);

    // Each turn ends in a sentence the page showed: the journaled reply is the bubble's text,
    // the model wrote it (not built from the results), and it is no tool-call text.
    let shown: Vec<(String, String)> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let r = &v["reply"];
            Some((
                r["step"].as_str()?.to_string(),
                r["text"].as_str()?.to_string(),
            ))
        })
        .collect();
    let replies = of("assistant_message");
    assert_eq!(replies.len(), 5, "{journal:#?}");
    let tools = ["clock", "remember", "forget", "calculator"];
    for ((step, text), event) in shown.iter().zip(&replies) {
        let journaled = event["payload"]["text"].as_str().unwrap();
        assert_eq!(
            text.trim(),
            journaled.trim(),
            "{step}: the page shows the reply"
        );
        assert_ne!(
            event["payload"]["fallback"], true,
            "{step}: the model answered"
        );
        assert_eq!(
            stead_actors::reply::problem(journaled, &tools, &[]),
            None,
            "{step}: {journaled:?}"
        );
    }
    let reply = |step: &str| {
        shown
            .iter()
            .find(|(s, _)| s == step)
            .unwrap()
            .1
            .to_lowercase()
    };
    // Whole words (or their stems): "note" is not "not", and "forget" restated is not
    // "forgotten".
    let says = |text: &str, stems: &[&str]| {
        text.split(|c: char| !c.is_alphanumeric() && c != '\'')
            .any(|w| {
                stems
                    .iter()
                    .any(|s| w == *s || (s.len() > 4 && w.starts_with(s)))
            })
    };
    assert!(reply("calculator").contains("391"), "{shown:?}");
    // The greeting is greeted back (no clock call, no time).
    assert!(
        says(
            &reply("greeting"),
            &[
                "hello",
                "hi",
                "hey",
                "greetings",
                "welcome",
                "help",
                "assist"
            ]
        ),
        "the greeting is answered: {shown:?}"
    );
    assert!(
        says(
            &reply("forget-approved"),
            &["delet", "remov", "forgot", "erase"]
        ),
        "the deletion is reported: {shown:?}"
    );
    assert!(
        says(
            &reply("forget-rejected"),
            &["not", "wasn't", "didn't", "rejected", "declined", "cannot"]
        ),
        "the rejection is reported: {shown:?}"
    );
    eprintln!("screenshots: {}", out.display());
}

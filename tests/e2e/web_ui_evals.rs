//! Evaluations in a real browser: `web-ui/e2e/evals.mjs` drives Debian's Chromium against a
//! running `stead serve` whose model is an upstream double (a test double). Route `default`
//! answers "what time" with a `clock` call and then the time; route `alt` answers without the
//! tool. In the browser: "Add to dataset" on a recorded user message with an expectation filled
//! in the form, a thumbs down with a correction turned into a case (graded by a judge: the same
//! double, asked on `default`), a run watched to its end, a run on `alt`, and the compare page
//! with a regression opened side by side. Then the compare
//! page of two runs of a dataset cut from 1,000 recorded sessions, timed (the figure goes to
//! docs/benchmarks.md; not asserted). Screenshots go to `{target}/tmp/web-ui-screenshots/`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::external;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

/// Sessions recorded for the 1,000-row comparison.
const MANY: usize = 1000;

fn reply(request: &Value) -> Reply {
    let alt = request["model"] == "m-alt";
    let last = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    if last["role"] == "tool" {
        return Reply::text("It is noon.");
    }
    let text = last["content"].as_str().unwrap_or_default().to_lowercase();
    // Asked to judge (any route can): the reply passes when it tells the time.
    if text.starts_with("you grade one answer") {
        let replied = text
            .rsplit("the assistant replied:")
            .next()
            .unwrap_or_default();
        let pass = replied.contains("noon");
        return Reply::text(
            &json!({"pass": pass, "reason": if pass { "It tells the time." } else { "It does not tell the time." }})
                .to_string(),
        );
    }
    if text.contains("time") {
        return if alt {
            Reply::text("I cannot tell the time.")
        } else {
            Reply::tool("clock", json!({}))
        };
    }
    // "Greeting N": `alt` answers every tenth otherwise (a regression of 100 cases in 1,000).
    let n: usize = text
        .trim_start_matches("greeting ")
        .trim()
        .parse()
        .unwrap_or(1);
    if alt && n % 10 == 0 {
        Reply::text("Goodbye.")
    } else {
        Reply::text("Hello.")
    }
}

async fn post(server: &Stead, path: &str, body: Value) -> Value {
    let (status, body) = server.call("POST", path, Some(body)).await;
    assert!((200..300).contains(&status), "{path}: {status} {body}");
    body
}

/// A session of `helper` with one message, answered.
async fn record(server: &Stead, text: &str) -> String {
    let (id, _) = server.create("helper").await;
    let answer = post(
        server,
        &format!("/v1/sessions/{id}/messages?wait=true"),
        json!({ "text": text }),
    )
    .await;
    assert_eq!(answer["status"], "idle", "{answer}");
    id
}

/// Starts a run of `dataset` on `route` and waits for its end.
async fn run(server: &Stead, dataset: &str, route: &str) -> Value {
    let id = post(
        server,
        "/v1/evals",
        json!({"dataset": dataset, "route": route, "concurrency": 8}),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        let (status, run) = server.call("GET", &format!("/v1/evals/{id}"), None).await;
        assert_eq!(status, 200, "{run}");
        if run["status"] != "running" {
            assert_eq!(run["status"], "finished", "{}", run["error"]);
            return run;
        }
        assert!(std::time::Instant::now() < deadline, "the run did not end");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_builds_runs_and_compares_evaluations() {
    let web_ui = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web-ui");
    assert!(
        web_ui.join("../node_modules/playwright-core").is_dir(),
        "needs `npm ci` at the repository root (scripts/build-web-ui.sh runs it)"
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let up = Upstream::respond(reply).await;
    let config = up.config(
        "default",
        r#"model = "m-default""#,
        r#"[[routes]]
name = "alt"
targets = [{ provider = "up", model = "m-alt" }]

[[agents]]
name = "helper"
route = "default"
system_prompt = "You help."

[[agents.tools]]
name = "clock"
kind = "clock"
"#,
    );
    let server = Stead::start(&config, None);

    // Recorded sessions: two for the browser's own dataset, 1,000 for the big comparison.
    let first = record(&server, "What time is it?").await;
    let second = record(&server, "Tell me the time, please.").await;
    let many: Vec<String> = futures_util::stream::iter(0..MANY)
        .map(|n| {
            let server = &server;
            async move { record(server, &format!("Greeting {n}")).await }
        })
        .buffered(8)
        .collect()
        .await;
    post(&server, "/v1/datasets", json!({"name": "greetings"})).await;
    futures_util::stream::iter(&many)
        .map(|id| {
            let server = &server;
            async move {
                post(
                    server,
                    "/v1/datasets/greetings/cases",
                    json!({ "session_id": id }),
                )
                .await
            }
        })
        .buffered(8)
        .collect::<Vec<_>>()
        .await;
    let started = std::time::Instant::now();
    let a = run(&server, "greetings", "default").await;
    let b = run(&server, "greetings", "alt").await;
    eprintln!(
        "two runs of {MANY} cases at concurrency 8 in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(a["summary"]["passed"], MANY);
    assert_eq!(b["summary"]["passed"], MANY - MANY / 10);

    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-screenshots");
    std::fs::create_dir_all(&out).unwrap();
    let shots = [
        "20-add-to-dataset",
        "21-feedback-case",
        "22-eval-run",
        "23-eval-compare",
        "24-eval-compare-case",
        "25-eval-compare-1000",
    ];
    for shot in shots {
        let _ = std::fs::remove_file(out.join(format!("{shot}.png")));
    }
    let mut command = Command::new("node");
    command
        .current_dir(&web_ui)
        .arg("e2e/evals.mjs")
        .arg(&server.base)
        .arg(&out)
        .arg(&first)
        .arg(&second)
        .arg(a["id"].as_str().unwrap())
        .arg(b["id"].as_str().unwrap())
        .env("CHROMIUM", &chromium);
    let stdout = external::run(command, Duration::from_secs(300), "the browser run failed")
        .await
        .stdout;
    assert!(stdout.contains(r#"{"done":true}"#), "{stdout}");
    for line in stdout.lines().filter(|l| l.contains("compare_1000")) {
        eprintln!("{line}");
    }
    for shot in shots {
        assert!(
            out.join(format!("{shot}.png")).is_file(),
            "screenshot {shot}"
        );
    }

    // What the browser made: the case with the form's expectation, the case from the rating.
    let (_, dataset) = server.call("GET", "/v1/datasets/web", None).await;
    let items = dataset["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{dataset}");
    assert_eq!(
        items[0]["turns"][0]["expect"],
        json!([{"type": "tool_called", "tool": "clock"}])
    );
    assert_eq!(items[0]["source"]["session_id"], json!(first));
    assert_eq!(items[1]["source"]["session_id"], json!(second));
    let rubric = items[1]["turns"][0]["expect"][0]["rubric"]
        .as_str()
        .unwrap();
    assert!(rubric.contains("It is twelve o'clock."), "{rubric}");
    let (_, feedback) = server
        .call("GET", &format!("/v1/sessions/{second}/feedback"), None)
        .await;
    assert_eq!(feedback["feedback"][0]["rating"], "down");
    assert_eq!(feedback["feedback"][0]["note"], "too vague");

    // The judge-graded case (the correction): the double, asked through the router on
    // `default`, passed the recorded route's reply and failed `alt`'s, its reasons kept.
    let (_, runs) = server.call("GET", "/v1/evals?dataset=web", None).await;
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let judged = |run: Value| {
        let case = run["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["case_id"] == items[1]["id"])
            .cloned()
            .unwrap();
        case["turns"][0]["verdicts"][0].clone()
    };
    // Newest first: `alt`, then `default`.
    let (_, on_alt) = server
        .call(
            "GET",
            &format!("/v1/evals/{}", runs[0]["id"].as_str().unwrap()),
            None,
        )
        .await;
    let (_, on_default) = server
        .call(
            "GET",
            &format!("/v1/evals/{}", runs[1]["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(
        judged(on_default),
        json!({"grader": "judge via default", "passed": true, "reasoning": "It tells the time."})
    );
    assert_eq!(
        judged(on_alt),
        json!({"grader": "judge via default", "passed": false, "detail": "It does not tell the time.", "reasoning": "It does not tell the time."})
    );
}

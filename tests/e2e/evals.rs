//! Evaluation from the journal through the real binary, on both backends: sessions recorded
//! by `stead serve` with the upstream double (a test double) and webhook tools (a webhook double
//! that counts calls) — a lookup, an approved delete, a rejected delete — become a dataset with
//! `stead eval dataset add`; `stead eval run` replays it against a route that behaves like the
//! recording (every case passes) and against one that calls other tools and arguments (every
//! case fails, with a diff naming the call and the argument), with `--fail-under` as the exit
//! code; `--agent-config` swaps the agent for one from another file (and refuses one that does
//! not fit the configuration); replay mode never reaches the webhook; `stead eval compare` names the regressions; and
//! a JSONL export imported on a fresh data directory runs to the same results.

use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};
use stead_testkit::webhook::Webhook;

/// Route `default` (model `m-default`) behaves as recorded; route `alt` (model `m-alt`) looks up
/// another table and archives instead of deleting. After a tool result the reply says whether
/// the call was done.
async fn upstream() -> Upstream {
    Upstream::respond(|request: &Value| {
        let alt = request["model"] == "m-alt";
        let last = request["messages"]
            .as_array()
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or_default();
        if last["role"] == "tool" {
            let content = last["content"].as_str().unwrap_or_default();
            return Reply::text(
                if content.contains("rejected") || content.contains("not available") {
                    "I did not do it."
                } else {
                    "Done."
                },
            );
        }
        let text = last["content"].as_str().unwrap_or_default().to_lowercase();
        if text.contains("find") {
            Reply::tool(
                "lookup",
                json!({ "table": if alt { "orders" } else { "users" } }),
            )
        } else if text.contains("delete") {
            Reply::tool(
                if alt { "archive_rows" } else { "delete_rows" },
                json!({ "table": "users" }),
            )
        } else {
            Reply::text("Hello.")
        }
    })
    .await
}

/// The `ops` agent on `route`, with its three webhook tools.
fn ops(route: &str, webhook: &Webhook) -> String {
    let tool = |name: &str, extra: &str| {
        format!(
            "[[agents.tools]]\nname = \"{name}\"\nkind = \"webhook\"\nurl = \"{}\"\n\
             description = \"{name} in a table\"\n{extra}\n",
            webhook.url(&format!("/{name}"))
        )
    };
    format!(
        "[[agents]]\nname = \"ops\"\nroute = \"{route}\"\nsystem_prompt = \"You run operations.\"\n\n{}{}{}",
        tool("lookup", "idempotent = true"),
        tool("delete_rows", "approval = \"always\""),
        tool("archive_rows", ""),
    )
}

fn config(upstream: &Upstream, webhook: &Webhook) -> String {
    upstream.config(
        "default",
        "model = \"m-default\"",
        &format!(
            "[[routes]]\nname = \"alt\"\ntargets = [{{ provider = \"up\", model = \"m-alt\" }}]\n\n{}",
            ops("default", webhook)
        ),
    )
}

fn cli(data: &Path, database_url: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = stead_testkit::stead::command();
    if let Some(url) = database_url {
        cmd.env("DATABASE_URL", url);
    }
    cmd.current_dir(data)
        .args(["--config", "stead.toml", "--data-dir"])
        .arg(data)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run stead")
}

fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "stead failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

async fn post(server: &Stead, path: &str, body: Value) -> Value {
    let (status, body) = server.call("POST", path, Some(body)).await;
    assert!((200..300).contains(&status), "{path}: {status} {body}");
    body
}

/// One session: `text`, its approval decided as `approve` says when it asks for one.
async fn record(server: &Stead, text: &str, approve: Option<bool>) -> String {
    let (id, _) = server.create("ops").await;
    let answer = post(
        server,
        &format!("/v1/sessions/{id}/messages?wait=true"),
        json!({ "text": text }),
    )
    .await;
    if let Some(approved) = approve {
        assert_eq!(answer["status"], "awaiting_approval", "{answer}");
        let call = answer["pending_approvals"][0]["call_id"].as_str().unwrap();
        post(
            server,
            &format!("/v1/sessions/{id}/approvals/{call}"),
            json!({ "approved": approved, "reason": "a person decided" }),
        )
        .await;
    }
    server.wait_for_status(&id, "idle").await;
    id
}

/// `stead eval run … --json`: the exit code and the run.
fn run(data: &Path, database_url: Option<&str>, args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["eval", "run", "suite", "--json"];
    all.extend_from_slice(args);
    let output = cli(data, database_url, &all);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let run: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not a run ({e}): {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), run)
}

fn failures(run: &Value) -> Vec<String> {
    run["cases"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["turns"].as_array().unwrap().iter())
        .flat_map(|t| t["verdicts"].as_array().unwrap().iter())
        .filter(|v| v["passed"] == false)
        .map(|v| v["detail"].as_str().unwrap().to_string())
        .collect()
}

async fn recorded_sessions_become_a_regression_suite(database_url: Option<&str>) {
    let upstream = upstream().await;
    let webhook = Webhook::start().await;
    let mut server = Stead::start(&config(&upstream, &webhook), database_url);
    let found = record(&server, "find the users", None).await;
    let deleted = record(&server, "delete the users", Some(true)).await;
    let kept = record(&server, "delete the users", Some(false)).await;
    let calls = webhook.deliveries().len();
    assert_eq!(calls, 2, "the lookup and the approved delete");
    server.signal(libc::SIGTERM);
    let data = server.data.path();

    ok(cli(
        data,
        database_url,
        &["eval", "dataset", "create", "suite"],
    ));
    for id in [&found, &deleted, &kept] {
        ok(cli(
            data,
            database_url,
            &["eval", "dataset", "add", "suite", "--session", id],
        ));
    }
    let listed = ok(cli(data, database_url, &["eval", "dataset", "list"]));
    assert!(listed.contains("suite\t3 cases"), "{listed}");

    // The recording's route: every case passes, and no tool ran.
    let (code, same) = run(data, database_url, &["--fail-under", "1"]);
    assert_eq!(code, Some(0), "{same}");
    assert_eq!(
        same["summary"],
        json!({"total": 3, "passed": 3, "failed": 0, "pass_rate": 1.0})
    );
    assert_eq!(
        webhook.deliveries().len(),
        calls,
        "replay mode reached the webhook"
    );

    // Another route: other arguments, another tool; the diff names them.
    let (code, other) = run(
        data,
        database_url,
        &[
            "--route",
            "alt",
            "--fail-under",
            "0.5",
            "--concurrency",
            "3",
        ],
    );
    assert_eq!(code, Some(1), "{other}");
    assert_eq!(other["summary"]["passed"], 0, "{other}");
    let failed = failures(&other);
    assert!(
        failed
            .iter()
            .any(|f| f == "call 1 `lookup`: `table` \"users\" → \"orders\""),
        "{failed:#?}"
    );
    assert!(
        failed
            .iter()
            .any(|f| f == "call 1: `delete_rows` became `archive_rows`"),
        "{failed:#?}"
    );
    let cases = other["cases"].as_array().unwrap();
    assert!(cases.iter().any(
        |c| c["turns"][0]["unavailable"].as_array().is_some_and(|u| u
            .iter()
            .any(|x| x.as_str().unwrap().starts_with("archive_rows")))
    ));
    assert_eq!(
        webhook.deliveries().len(),
        calls,
        "replay mode reached the webhook"
    );
    // The agent from another file (here: the same agent on `alt`) fails the same way; without
    // --fail-under a failing run still exits 0: the report is the result.
    let agents = data.join("agents.toml");
    std::fs::write(&agents, ops("alt", &webhook)).unwrap();
    let (code, changed) = run(
        data,
        database_url,
        &["--agent-config", agents.to_str().unwrap()],
    );
    assert_eq!(code, Some(0));
    assert_eq!(changed["summary"]["passed"], 0, "{changed}");
    assert_eq!(failures(&changed).len(), failed.len(), "{changed}");
    std::fs::write(
        &agents,
        "[[agents]]\nname = \"ops\"\nroute = \"nowhere\"\nsystem_prompt = \"x\"\n",
    )
    .unwrap();
    let refused = cli(
        data,
        database_url,
        &[
            "eval",
            "run",
            "suite",
            "--agent-config",
            agents.to_str().unwrap(),
        ],
    );
    assert!(!refused.status.success());
    let error = String::from_utf8_lossy(&refused.stderr);
    assert!(error.contains("do not fit the configuration"), "{error}");

    let (a, b) = (same["id"].as_str().unwrap(), other["id"].as_str().unwrap());
    let compared: Value = serde_json::from_str(&ok(cli(
        data,
        database_url,
        &["eval", "compare", a, b, "--json"],
    )))
    .unwrap();
    assert_eq!(
        (compared["regressed"].as_u64(), compared["fixed"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(compared["a"]["pass_rate"], 1.0);
    assert_eq!(compared["b"]["pass_rate"], 0.0);
    let text = ok(cli(data, database_url, &["eval", "compare", a, b]));
    assert!(text.contains("3 regressed, 0 fixed"), "{text}");
    assert!(text.contains("pass → FAIL"), "{text}");

    // JSONL out, into a fresh data directory (SQLite), and the same results there.
    let file = data.join("suite.jsonl");
    ok(cli(
        data,
        database_url,
        &[
            "eval",
            "dataset",
            "export",
            "suite",
            "--out",
            file.to_str().unwrap(),
        ],
    ));
    let fresh = tempfile::tempdir().unwrap();
    std::fs::write(fresh.path().join("stead.toml"), config(&upstream, &webhook)).unwrap();
    let imported = ok(cli(
        fresh.path(),
        None,
        &["eval", "dataset", "import", file.to_str().unwrap()],
    ));
    assert!(
        imported.contains("imported 3 cases into suite"),
        "{imported}"
    );
    let (code, again) = run(fresh.path(), None, &["--fail-under", "1"]);
    assert_eq!(code, Some(0), "{again}");
    let verdicts = |run: &Value| -> Vec<(String, bool)> {
        let mut v: Vec<_> = run["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["case_id"].as_str().unwrap().to_string(),
                    c["passed"] == true,
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(verdicts(&again), verdicts(&same));
    assert_eq!(webhook.deliveries().len(), calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_sessions_become_a_regression_suite_on_sqlite() {
    recorded_sessions_become_a_regression_suite(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_sessions_become_a_regression_suite_on_postgres() {
    let scratch = stead_testkit::db::scratch_postgres("stead_evals").await;
    recorded_sessions_become_a_regression_suite(Some(scratch.url())).await;
    scratch.drop_database().await.unwrap();
}

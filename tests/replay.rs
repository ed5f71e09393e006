//! Replay debugging through the real binary: `stead session …` and `stead replay …` against the
//! database of a running `stead serve`, whose sessions are recorded with a scripted upstream
//! model (a test double) and the built-in demo agent (its `forget` tool always needs approval).

#[path = "support/stead.rs"]
mod stead;
#[path = "support/upstream.rs"]
mod upstream;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use stead::Stead;
use stead_persistence::scratch::ScratchDatabase;
use upstream::{Reply, Upstream};

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
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_stead"));
    for (name, _) in std::env::vars() {
        if name.starts_with("STEAD_") || name == "DATABASE_URL" || name.starts_with("OTEL_") {
            cmd.env_remove(name);
        }
    }
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

/// Waits until the session's status is `want`.
async fn wait_status(server: &Stead, id: &str, want: &str) {
    for _ in 0..200 {
        let (_, body) = server
            .call("GET", &format!("/v1/sessions/{id}"), None)
            .await;
        if body["status"] == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("session {id} never became {want}");
}

/// Records a session: a turn whose `forget` call is approved, then a plain text turn.
async fn record(server: &Stead, upstream: &Upstream) -> String {
    let (id, _) = server.create("demo").await;
    upstream.push([
        Reply::Tool {
            name: "forget".into(),
            arguments: json!({ "op": "delete", "key": "draft" }),
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
    wait_status(server, &id, "idle").await;
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

async fn round_trip_and_check(database_url: Option<&str>) {
    let upstream = upstream().await;
    let server = Stead::start(&config(&upstream, ""), database_url);
    let id = record(&server, &upstream).await;
    let dir = server.data.path();
    let first = dir.join("first.jsonl");
    ok(cli(
        &server,
        database_url,
        &["replay", "export", &id, "-o", first.to_str().unwrap()],
    ));
    let imported = ok(cli(
        &server,
        database_url,
        &["replay", "import", first.to_str().unwrap(), "--json"],
    ));
    let imported: Value = serde_json::from_slice(&imported.stdout).unwrap();
    let new_id = imported["id"].as_str().unwrap().to_string();
    assert_ne!(new_id, id, "an import gets a new id");
    assert_eq!(imported["imported_from"], json!(id));
    assert_eq!(imported["status"], "idle");

    // The imported session's journal equals the original by value (seqs, kinds, payloads,
    // times), over REST and as a second export.
    assert_eq!(server.journal(&new_id).await, server.journal(&id).await);
    let second = dir.join("second.jsonl");
    ok(cli(
        &server,
        database_url,
        &["replay", "export", &new_id, "-o", second.to_str().unwrap()],
    ));
    let (a, b) = (read_lines(&first), read_lines(&second));
    assert_eq!(a.len(), b.len());
    assert_eq!(a[1..], b[1..], "events equal by value");
    for key in [
        "format",
        "version",
        "agent",
        "agent_config_hash",
        "status",
        "last_seq",
    ] {
        assert_eq!(a[0][key], b[0][key], "header `{key}`");
    }
    assert_eq!(b[0]["session_id"], json!(new_id));
    // The metadata is kept, plus where the journal came from.
    let mut metadata = a[0]["metadata"].clone();
    metadata["imported_from"] = json!([{ "session_id": id, "through_seq": a.len() - 1 }]);
    assert_eq!(b[0]["metadata"], metadata);
    assert_eq!(a[0]["last_seq"], json!(a.len() - 1));
    assert!(a[0]["agent_config_hash"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));

    // The recorded decisions are what the current code decides: from the database and from
    // the file.
    let checked = ok(cli(
        &server,
        database_url,
        &[
            "replay",
            "check",
            &id,
            &new_id,
            "--file",
            first.to_str().unwrap(),
            "--json",
        ],
    ));
    let report: Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(report["summary"]["ok"], 3, "{report}");
    assert_eq!(report["summary"]["diverged"], 0);

    // `replay state` is the REST state at a seq, by value.
    let at = seq_of(&server.journal(&id).await, "approval_requested");
    let (_, rest) = server
        .call("GET", &format!("/v1/sessions/{id}/state?at={at}"), None)
        .await;
    let cli_state = ok(cli(
        &server,
        database_url,
        &["replay", "state", &id, "--at", &at.to_string()],
    ));
    assert_eq!(
        serde_json::from_slice::<Value>(&cli_state.stdout).unwrap(),
        rest
    );
    assert_eq!(rest["status"], "awaiting_approval");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_import_round_trip_is_equal_by_value_on_sqlite() {
    round_trip_and_check(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_import_round_trip_is_equal_by_value_on_postgres() {
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) if url.starts_with("postgres") => url,
        _ => panic!("needs DATABASE_URL=postgres://…; scripts/test.sh starts a throwaway server"),
    };
    let scratch = ScratchDatabase::create(&admin, "stead_replay")
        .await
        .unwrap();
    round_trip_and_check(Some(scratch.url())).await;
    scratch.drop_database().await.unwrap();
}

/// The demo agent with `forget` approved by policy instead of by a person.
const FORGET_WITHOUT_APPROVAL: &str = r#"
[[agents]]
name = "demo"
route = "default"
system_prompt = "You are a helpful assistant. You can remember and forget notes."

[[agents.tools]]
name = "clock"
kind = "clock"
description = "The current date and time (UTC)"

[[agents.tools]]
name = "remember"
kind = "memory"
description = "Store, read and list notes"
ops = ["get", "set", "list"]

[[agents.tools]]
name = "forget"
kind = "memory"
description = "Delete a stored note (destructive)"
approval = "never"
ops = ["delete"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_the_seq_where_a_changed_approval_policy_decides_otherwise() {
    let upstream = upstream().await;
    let server = Stead::start(&config(&upstream, ""), None);
    let id = record(&server, &upstream).await;
    let journal = server.journal(&id).await;
    let parked_at = seq_of(&journal, "approval_requested");
    let dir = server.data.path();
    let file = dir.join("session.jsonl");
    ok(cli(
        &server,
        None,
        &["replay", "export", &id, "-o", file.to_str().unwrap()],
    ));
    std::fs::write(
        dir.join("changed.toml"),
        config(&upstream, FORGET_WITHOUT_APPROVAL),
    )
    .unwrap();

    for source in [vec![id.as_str()], vec!["--file", file.to_str().unwrap()]] {
        let mut args = vec!["replay", "check"];
        args.extend(source.iter().copied());
        // Unchanged code: passes.
        let unchanged = cli(&server, None, &args);
        assert!(unchanged.status.success(), "{}", stdout(&unchanged));
        assert!(stdout(&unchanged).contains("1 ok, 0 diverged"));
        // The policy changed: the first divergence is where the approval was asked for.
        let changed = cli_with(dir, "changed.toml", None, &args);
        assert_eq!(changed.status.code(), Some(1), "{}", stdout(&changed));
        let text = stdout(&changed);
        assert!(
            text.contains(&format!("DIVERGED  {id}  at seq {parked_at}")),
            "{text}"
        );
        args.push("--json");
        let report: Value =
            serde_json::from_slice(&cli_with(dir, "changed.toml", None, &args).stdout).unwrap();
        let divergence = &report["sessions"][0]["divergence"];
        assert_eq!(divergence["seq"], parked_at, "{report}");
        assert_eq!(divergence["recorded"]["kind"], "approval_requested");
        assert_eq!(divergence["decided"]["kind"], "tool_call_started");
        assert_eq!(divergence["decided"]["payload"]["tool"], "forget");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_copies_the_first_n_events_and_later_calls_use_the_override() {
    let upstream = upstream().await;
    let server = Stead::start(&config(&upstream, ""), None);
    let id = record(&server, &upstream).await;
    let source = server.journal(&id).await;
    let at = seq_of(&source, "turn_finished");
    let prompt = server.data.path().join("prompt.txt");
    std::fs::write(&prompt, "You are a terse pirate.").unwrap();
    let forked = ok(cli(
        &server,
        None,
        &[
            "replay",
            "fork",
            &id,
            "--at",
            &at.to_string(),
            "--route",
            "alt",
            "--system-prompt-file",
            prompt.to_str().unwrap(),
            "--json",
        ],
    ));
    let forked: Value = serde_json::from_slice(&forked.stdout).unwrap();
    let fork_id = forked["id"].as_str().unwrap().to_string();
    assert_eq!(forked["status"], "idle");

    let journal = server.journal(&fork_id).await;
    assert_eq!(journal[..at as usize], source[..at as usize]);
    assert_eq!(journal[at as usize]["kind"], "session_forked");
    assert_eq!(
        journal[at as usize]["payload"],
        json!({ "from": id, "at": at, "overrides": {
            "route": "alt", "system_prompt": "You are a terse pirate." } })
    );

    // The fork continues from N: its next model call goes to the other route, with the
    // other system prompt.
    let before = upstream.requests().len();
    let done = post(
        &server,
        &format!("/v1/sessions/{fork_id}/messages?wait=true"),
        json!({ "text": "and now?" }),
    )
    .await;
    assert_eq!(done["status"], "idle", "{done}");
    let journal = server.journal(&fork_id).await;
    let started: Vec<&Value> = journal[at as usize..]
        .iter()
        .filter(|e| e["kind"] == "model_call_started")
        .collect();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["payload"]["route"], "alt");
    let requests = upstream.requests();
    assert_eq!(requests.len(), before + 1);
    let request = requests.last().unwrap();
    assert_eq!(request["model"], "m-alt");
    assert_eq!(request["messages"][0]["role"], "system");
    assert!(request["messages"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("You are a terse pirate."));
    // The source is untouched, and the fork checks clean.
    assert_eq!(server.journal(&id).await, source);
    ok(cli(&server, None, &["replay", "check", &fork_id]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_imports_are_refused_with_the_line_number() {
    let upstream = upstream().await;
    let server = Stead::start(&config(&upstream, ""), None);
    let id = record(&server, &upstream).await;
    let dir = server.data.path();
    let good = dir.join("good.jsonl");
    ok(cli(
        &server,
        None,
        &["replay", "export", &id, "-o", good.to_str().unwrap()],
    ));
    let text = std::fs::read_to_string(&good).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let join = |lines: &[&str]| lines.join("\n") + "\n";
    let without = |n: usize| {
        let mut l = lines.clone();
        l.remove(n - 1);
        join(&l)
    };
    let replaced = |n: usize, with: &str| {
        let mut l = lines.clone();
        l[n - 1] = with;
        join(&l)
    };
    let last = lines.len();
    let cases: Vec<(&str, String, String)> = vec![
        ("empty", String::new(), "line 1:".into()),
        (
            "header",
            replaced(1, "{not json"),
            "line 1: the header is not JSON".into(),
        ),
        (
            "foreign",
            replaced(1, r#"{"format":"other","version":1}"#),
            "line 1: not a Stead session export".into(),
        ),
        (
            "gap",
            without(4),
            "line 4: gap in the journal: seq 4 follows seq 2".into(),
        ),
        (
            "bad-json",
            replaced(3, "{\"seq\": 2,"),
            "line 3: malformed event".into(),
        ),
        (
            "unknown-kind",
            replaced(
                3,
                r#"{"seq":2,"kind":"made_up","payload":{},"at":"2026-11-30T00:00:00Z"}"#,
            ),
            "line 3: event `made_up` at seq 2 is not valid".into(),
        ),
        (
            "bad-payload",
            replaced(
                3,
                r#"{"seq":2,"kind":"user_message","payload":{"text":5},"at":"2026-11-30T00:00:00Z"}"#,
            ),
            "line 3: event `user_message` at seq 2 is not valid".into(),
        ),
        ("blank", replaced(5, " "), "line 5: empty line".into()),
        (
            "truncated",
            join(&lines[..last - 2]),
            format!("line {}: the file ends at seq {}", last - 2, last - 3),
        ),
    ];
    let count = |server: &Stead| {
        let listed = ok(cli(server, None, &["session", "list", "--json"]));
        serde_json::from_slice::<Value>(&listed.stdout).unwrap()["sessions"]
            .as_array()
            .unwrap()
            .len()
    };
    let sessions = count(&server);
    for (name, content, expected) in cases {
        let path = dir.join(format!("{name}.jsonl"));
        std::fs::write(&path, content).unwrap();
        let refused = cli(&server, None, &["replay", "import", path.to_str().unwrap()]);
        assert!(!refused.status.success(), "{name} was imported");
        let message = stderr(&refused);
        assert!(message.contains(&expected), "{name}: {message}");
        assert_eq!(message.lines().count(), 1, "{name}: one line: {message}");
    }
    assert_eq!(count(&server), sessions, "nothing was imported");
    ok(cli(
        &server,
        None,
        &["replay", "import", good.to_str().unwrap()],
    ));
    assert_eq!(count(&server), sessions + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_shows_the_events_of_a_running_turn_as_they_commit() {
    let upstream = upstream().await;
    let server = Stead::start(&config(&upstream, ""), None);
    let (id, _) = server.create("demo").await;
    let mut tail = Command::new(env!("CARGO_BIN_EXE_stead"))
        .env_remove("DATABASE_URL")
        .env_remove("STEAD_CONFIG")
        .current_dir(server.data.path())
        .args(["--config", "stead.toml", "--data-dir"])
        .arg(server.data.path())
        .args(["session", "tail", &id, "--json", "--interval-ms", "50"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<Value>();
    let out = tail.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if lines_tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                return;
            }
        }
    });
    let next_kind = |want: &str| loop {
        let event = lines_rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("tail showed no {want}"));
        if event["kind"] == want {
            return event;
        }
    };
    assert_eq!(next_kind("session_created")["seq"], 1);

    // The model asks for `forget`, which parks the turn; the second answer is slow.
    upstream.push([
        Reply::Tool {
            name: "forget".into(),
            arguments: json!({ "op": "delete", "key": "draft" }),
        },
        Reply::slow_text("Forgotten.", Duration::from_secs(2)),
    ]);
    post(
        &server,
        &format!("/v1/sessions/{id}/messages"),
        json!({ "text": "forget my draft" }),
    )
    .await;
    next_kind("user_message");
    next_kind("model_call_started");
    let parked = next_kind("approval_requested");
    let (_, row) = server
        .call("GET", &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(row["status"], "awaiting_approval", "the turn is still open");
    let call_id = parked["payload"]["call_id"].as_str().unwrap().to_string();
    post(
        &server,
        &format!("/v1/sessions/{id}/approvals/{call_id}"),
        json!({ "approved": true }),
    )
    .await;
    next_kind("tool_call_finished");
    let second_call = next_kind("model_call_started");
    // The slow model call is still running when tail shows that it started.
    let (_, row) = server
        .call("GET", &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(row["status"], "running", "{row}");
    assert_eq!(row["last_seq"], second_call["seq"]);
    next_kind("model_call_finished");
    let finished = next_kind("turn_finished");
    assert_eq!(finished["payload"]["reason"], "completed");
    let _ = tail.kill();
    let _ = tail.wait();
    // Each line was the journal's event, by value.
    let journal = server.journal(&id).await;
    assert_eq!(journal.last().unwrap(), &finished);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_keeps_the_latest_state_and_spares_open_sessions() {
    let upstream = upstream().await;
    let extra = "[sessions]\nkeep_journal_days = 0\n";
    let server = Stead::start(&config(&upstream, extra), None);
    let id = record(&server, &upstream).await;
    let open_id = record(&server, &upstream).await;
    let open_journal = server.journal(&open_id).await;

    // An open session is refused, and keeps its journal.
    let refused = cli(&server, None, &["session", "compact", &open_id]);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("is idle"), "{}", stderr(&refused));
    assert_eq!(server.journal(&open_id).await, open_journal);

    let (status, _) = server
        .call("DELETE", &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(status, 200);
    let (_, latest) = server
        .call("GET", &format!("/v1/sessions/{id}/state"), None)
        .await;
    let last_seq = latest["seq"].as_i64().unwrap();
    let (_, at_last) = server
        .call(
            "GET",
            &format!("/v1/sessions/{id}/state?at={last_seq}"),
            None,
        )
        .await;
    assert_eq!(at_last, latest);

    // The policy compacts the closed session only.
    let compacted = ok(cli(
        &server,
        None,
        &["session", "compact", "--policy", "--json"],
    ));
    let compacted: Value = serde_json::from_slice(&compacted.stdout).unwrap();
    assert_eq!(compacted["compacted"].as_array().unwrap().len(), 1);
    assert_eq!(compacted["compacted"][0]["session_id"], json!(id));
    assert_eq!(compacted["compacted"][0]["through_seq"], last_seq);
    assert_eq!(
        compacted["compacted"][0]["summary"]["events"],
        json!(last_seq)
    );
    assert_eq!(server.journal(&open_id).await, open_journal);

    // A restarted server activates the compacted session from its snapshot: the latest state
    // is identical; earlier seqs are gone (410); the events page says where the cut is.
    let data = server.kill();
    let server = Stead::start_in(data, &config(&upstream, extra), None);
    let (_, after) = server
        .call("GET", &format!("/v1/sessions/{id}/state"), None)
        .await;
    assert_eq!(after, latest);
    let (status, at_last_after) = server
        .call(
            "GET",
            &format!("/v1/sessions/{id}/state?at={last_seq}"),
            None,
        )
        .await;
    assert_eq!((status, &at_last_after), (200, &latest));
    let (status, gone) = server
        .call("GET", &format!("/v1/sessions/{id}/state?at=1"), None)
        .await;
    assert_eq!(status, 410);
    assert_eq!(gone["error"]["code"], "compacted");
    let (_, events) = server
        .call("GET", &format!("/v1/sessions/{id}/events"), None)
        .await;
    assert_eq!(
        events,
        json!({ "events": [], "last_seq": last_seq, "compacted_through": last_seq })
    );
    let cli_state = ok(cli(&server, None, &["replay", "state", &id]));
    assert_eq!(
        serde_json::from_slice::<Value>(&cli_state.stdout).unwrap(),
        latest
    );
    // Compacted sessions are skipped by the check, not failed; the open one still passes.
    let checked = ok(cli(&server, None, &["replay", "check", "--all", "--json"]));
    let report: Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(
        (
            &report["summary"]["ok"],
            &report["summary"]["skipped"],
            &report["summary"]["diverged"]
        ),
        (&json!(1), &json!(1), &json!(0)),
        "{report}"
    );
    // An export needs the whole journal.
    let refused = cli(&server, None, &["replay", "export", &id]);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("compacted"));
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The recorded sessions kept under `tests/fixtures/` pass the check with the built-in
/// configuration (the demo agent as shipped): a change to the agent loop's decisions shows
/// up here as a divergence with its seq.
#[test]
fn recorded_fixtures_pass_the_decision_check() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "fixtures: {files:?}");
    let data = tempfile::tempdir().unwrap();
    let mut args = vec!["replay".to_string(), "check".into(), "--verbose".into()];
    for file in &files {
        args.push("--file".into());
        args.push(file.display().to_string());
    }
    std::fs::write(data.path().join("empty.toml"), "").unwrap();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = cli_with(data.path(), "empty.toml", None, &args);
    assert!(
        output.status.success(),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(stdout(&output).contains(&format!("{} ok, 0 diverged", files.len())));
}

/// Regenerates `tests/fixtures/` (run by hand: `cargo test --test replay -- --ignored`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes tests/fixtures; run by hand after a deliberate change of decisions"]
async fn regenerate_fixtures() {
    let upstream = upstream().await;
    let server = Stead::start(&config(&upstream, ""), None);
    let export = |id: &str, name: &str| {
        let path = fixtures().join(format!("{name}.jsonl"));
        ok(cli(
            &server,
            None,
            &["replay", "export", id, "-o", path.to_str().unwrap()],
        ));
    };
    // 1. An approved destructive call, then a plain turn.
    let approved = record(&server, &upstream).await;
    export(&approved, "approved-tool-then-chat");

    // 2. A rejected call (the model then answers without it), and a clock call that needs
    //    no approval.
    let (id, _) = server.create("demo").await;
    upstream.push([
        Reply::Tool {
            name: "forget".into(),
            arguments: json!({ "op": "delete", "key": "plans" }),
        },
        Reply::text("Understood, I kept it."),
        Reply::Tool {
            name: "clock".into(),
            arguments: json!({}),
        },
        Reply::text("It is late."),
    ]);
    let parked = post(
        &server,
        &format!("/v1/sessions/{id}/messages?wait=true"),
        json!({ "text": "forget my plans" }),
    )
    .await;
    let call_id = parked["pending_approvals"][0]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    post(
        &server,
        &format!("/v1/sessions/{id}/approvals/{call_id}"),
        json!({ "approved": false, "reason": "keep it" }),
    )
    .await;
    wait_status(&server, &id, "idle").await;
    post(
        &server,
        &format!("/v1/sessions/{id}/messages?wait=true"),
        json!({ "text": "what time is it?" }),
    )
    .await;
    let (status, _) = server
        .call("DELETE", &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(status, 200);
    export(&id, "rejected-tool-clock-closed");

    // 3. A fork of the first session on another route, continued.
    let at = seq_of(&server.journal(&approved).await, "turn_finished");
    let forked = post(
        &server,
        &format!("/v1/sessions/{approved}/fork"),
        json!({ "at": at, "overrides": { "route": "alt" } }),
    )
    .await;
    let fork_id = forked["id"].as_str().unwrap().to_string();
    post(
        &server,
        &format!("/v1/sessions/{fork_id}/messages?wait=true"),
        json!({ "text": "again, on the other route" }),
    )
    .await;
    export(&fork_id, "forked-on-another-route");
}

//! The decision check (a changed approval policy, the recorded fixtures) and forks.

use std::path::PathBuf;
use stead_testkit::client::Api;

use super::*;

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
kind = "memory_block"
description = "Save a note"
ops = ["append"]

[[agents.tools]]
name = "forget"
kind = "memory_block"
description = "Delete a saved note (destructive)"
approval = "never"
ops = ["remove"]
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
        json!({ "from": id, "at": at, "principal": "local", "overrides": {
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

/// Regenerates `tests/fixtures/` (run by hand:
/// `cargo test --test e2e replay::check::regenerate_fixtures -- --ignored`).
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
            arguments: json!({ "op": "remove", "old": "plans" }),
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
    server.wait_for_status(&id, "idle").await;
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

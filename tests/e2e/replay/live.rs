//! Commands against the database of a running server: `session tail` while a turn runs, and
//! compaction that spares open sessions.

use std::io::{BufRead, BufReader};
use stead_testkit::client::Api;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_shows_the_events_of_a_running_turn_as_they_commit() {
    let upstream = upstream().await;
    let server = Stead::start(&config(&upstream, ""), None);
    let (id, _) = server.create("demo").await;
    // Killed when the test ends, also when it fails (it would hold the test's output open).
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut tail = stead_testkit::stead::command()
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
    let tail = Killed(tail);
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
            arguments: json!({ "op": "remove", "old": "draft" }),
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
    // The memory block holds no line with "draft": the approved call fails back to the model.
    next_kind("tool_call_failed");
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
    drop(tail);
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

//! Schedules through `stead serve` itself (docs/schedules.md): a delay that comes due while
//! the server is down (killed with SIGKILL) fires once after the restart, late; and two servers
//! on one PostgreSQL fire each occurrence of many recurring schedules exactly once. The model is
//! the fake upstream test double.

use std::time::Duration;

use serde_json::{json, Value};
use stead_persistence::scratch::ScratchDatabase;
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;
use stead_testkit::{db, ops};

async fn database(postgres: bool) -> Option<ScratchDatabase> {
    if !postgres {
        return None;
    }
    Some(db::scratch_postgres("stead_sched").await)
}

fn fired(journal: &[Value]) -> Vec<&Value> {
    journal
        .iter()
        .filter(|e| e["kind"] == "schedule_fired")
        .map(|e| &e["payload"])
        .collect()
}

/// Polls the journal until `done` holds (up to 30 s).
async fn journal_until(server: &Stead, id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    for _ in 0..300 {
        let journal = server.journal(id).await;
        if done(&journal) {
            return journal;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the journal never got there: {:?}",
        server.journal(id).await
    );
}

async fn due_while_down(postgres: bool) {
    let scratch = database(postgres).await;
    let url = scratch.as_ref().map(|s| s.url().to_string());
    let fake = ops::upstream().await;
    let (hook_url, _) = ops::webhook().await;
    let config = ops::config(&fake.base_url, &hook_url, "");
    let server = Stead::start(&config, url.as_deref());
    let (id, _) = server.create("ops").await;
    let (status, created) = server
        .call(
            "POST",
            &format!("/v1/sessions/{id}/schedules"),
            Some(json!({"key": "ping", "message": {"text": "ping"}, "delay_secs": 2})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let data = server.kill();
    // Down while it comes due.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let server = Stead::start_in(data, &config, url.as_deref());
    let journal = journal_until(&server, &id, |j| {
        j.last().is_some_and(|e| e["kind"] == "turn_finished")
    })
    .await;
    let once = fired(&journal);
    assert_eq!(once.len(), 1, "{journal:?}");
    assert_eq!(once[0]["due_at"], created["next_due_at"]);
    assert!(
        once[0]["at"].as_str().unwrap() > once[0]["due_at"].as_str().unwrap(),
        "late, after the restart"
    );
    // Never again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(fired(&server.journal(&id).await).len(), 1);
    assert_eq!(fake.requests().len(), 1, "one turn, one model call");
    drop(server);
    if let Some(scratch) = scratch {
        scratch.drop_database().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_schedule_due_while_the_server_was_killed_fires_once_after_restart() {
    due_while_down(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_schedule_due_while_the_server_was_killed_fires_once_after_restart() {
    due_while_down(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_postgres_fire_each_occurrence_once() {
    let scratch = database(true).await.unwrap();
    let url = scratch.url().to_string();
    let fake = ops::upstream().await;
    let (hook_url, _) = ops::webhook().await;
    let node = |name: &str| {
        ops::config(
            &fake.base_url,
            &hook_url,
            &format!(
                "[server]\nnode_id = \"{name}\"\n[sessions]\npassivate_after_secs = 1\n\
                 [schedules]\npoll_ms = 100\n"
            ),
        )
    };
    let a = Stead::start(&node("node-a"), Some(&url));
    let b = Stead::start(&node("node-b"), Some(&url));
    let mut ids = Vec::new();
    for i in 0..6 {
        let server = if i % 2 == 0 { &a } else { &b };
        let (id, _) = server.create("ops").await;
        let (status, body) = server
            .call(
                "POST",
                &format!("/v1/sessions/{id}/schedules"),
                Some(json!({"key": "tick", "message": {"text": "tick"}, "every_secs": 1, "catch_up": "all"})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        ids.push(id);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    for id in &ids {
        let (status, _) = a
            .call("DELETE", &format!("/v1/sessions/{id}/schedules/tick"), None)
            .await;
        if status != 200 {
            // Held by the other node.
            let (status, body) = b
                .call("DELETE", &format!("/v1/sessions/{id}/schedules/tick"), None)
                .await;
            assert_eq!(status, 200, "{body}");
        }
    }
    for id in &ids {
        let journal = a.journal(id).await;
        let due: Vec<&str> = fired(&journal)
            .iter()
            .map(|f| f["due_at"].as_str().unwrap())
            .collect();
        assert!(due.len() >= 3, "session {id} fired {} times", due.len());
        let mut unique = due.clone();
        unique.dedup();
        assert_eq!(unique, due, "session {id}: an occurrence fired twice");
        let mut sorted = due.clone();
        sorted.sort();
        assert_eq!(sorted, due, "in due order");
    }
    drop(a);
    drop(b);
    scratch.drop_database().await.unwrap();
}

/// The short version of `stead bench schedules` (the figures in docs/benchmarks.md come from
/// the full one): every occurrence due in the window fires, once.
#[test]
fn the_schedules_benchmark_fires_every_due_occurrence_once() {
    let dir = tempfile::tempdir().unwrap();
    let output = stead_testkit::stead::command()
        .arg("--data-dir")
        .arg(dir.path())
        .args([
            "bench",
            "schedules",
            "--schedules",
            "400",
            "--sessions",
            "40",
        ])
        .args(["--rates", "100", "--seconds", "3", "--idle", "1", "--json"])
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let result = &report["results"][0];
    assert_eq!(result["schedules"], 400, "{report}");
    assert_eq!(result["period_secs"], 4, "{report}");
    assert_eq!(result["due"], 300, "{report}");
    assert_eq!(result["fired"], result["due"], "{report}");
    assert_eq!(result["duplicates"], 0, "{report}");
    assert!(result["lag_p99_ms"].as_f64().unwrap() >= result["lag_p50_ms"].as_f64().unwrap());
}

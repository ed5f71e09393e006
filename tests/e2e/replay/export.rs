//! Export and import: a round trip is equal by value on both backends; malformed imports are
//! refused with the line number.

use stead_testkit::client::Api;
use stead_testkit::db;

use super::*;

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
    let scratch = db::scratch_postgres("stead_replay").await;
    round_trip_and_check(Some(scratch.url())).await;
    scratch.drop_database().await.unwrap();
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

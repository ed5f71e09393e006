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

/// A 1×1 PNG.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x02\0\0\0\x90wS\xde\0\0\0\x0cIDATx\x9cc\xf8\xcf\xc0\0\0\x03\x01\x01\0\xc9\xfe\x92\xef\0\0\0\0IEND\xaeB`\x82";

/// A session's artifacts travel in its export: the import stores the bytes again, under new
/// ids that its messages name; an export whose bytes were altered is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_travel_with_their_session() {
    use base64::Engine as _;
    let upstream = Upstream::start(Vec::new(), Reply::text("A tiny image.")).await;
    let server = Stead::start(&config(&upstream, ""), None);
    let (id, _) = server.create("demo").await;
    let uploaded: Value = reqwest::Client::new()
        .post(format!("{}/v1/artifacts?session_id={id}", server.base))
        .body(PNG.to_vec())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let old_id = uploaded["id"].as_str().unwrap().to_string();
    post(
        &server,
        &format!("/v1/sessions/{id}/messages?wait=true"),
        json!({ "text": "What is this?", "attachments": [{ "artifact_id": old_id }] }),
    )
    .await;

    let file = server.data.path().join("with-artifacts.jsonl");
    ok(cli(
        &server,
        None,
        &["replay", "export", &id, "-o", file.to_str().unwrap()],
    ));
    let lines = read_lines(&file);
    let last = lines.last().unwrap();
    assert_eq!(last["artifact"]["id"], json!(old_id));
    assert_eq!(last["artifact"]["content_type"], "image/png");
    let data = last["artifact"]["data"].as_str().unwrap();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
        PNG
    );

    let imported = ok(cli(
        &server,
        None,
        &["replay", "import", file.to_str().unwrap(), "--json"],
    ));
    let imported: Value = serde_json::from_slice(&imported.stdout).unwrap();
    let new_session = imported["id"].as_str().unwrap();
    let (_, listed) = server
        .call(
            "GET",
            &format!("/v1/sessions/{new_session}/artifacts"),
            None,
        )
        .await;
    let copies = listed["artifacts"].as_array().unwrap();
    assert_eq!(copies.len(), 1, "{listed}");
    let new_id = copies[0]["id"].as_str().unwrap();
    assert_ne!(new_id, old_id);
    assert_eq!(copies[0]["sha256"], uploaded["sha256"]);
    let message = server
        .journal(new_session)
        .await
        .into_iter()
        .find(|e| e["kind"] == "user_message")
        .unwrap();
    assert_eq!(
        message["payload"]["attachments"][0]["artifact_id"],
        json!(new_id)
    );
    let bytes = reqwest::get(format!("{}/v1/artifacts/{new_id}", server.base))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(bytes.as_ref(), PNG);

    // Altered bytes: refused, naming the artifact's digest; nothing imported.
    let altered = server.data.path().join("altered.jsonl");
    let mut text: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let mut line: Value = serde_json::from_str(text.last().unwrap()).unwrap();
    line["artifact"]["data"] = json!(base64::engine::general_purpose::STANDARD.encode(b"not it"));
    *text.last_mut().unwrap() = line.to_string();
    std::fs::write(&altered, text.join("\n")).unwrap();
    let (_, before) = server.call("GET", "/v1/sessions?limit=100", None).await;
    let refused = cli(
        &server,
        None,
        &["replay", "import", altered.to_str().unwrap()],
    );
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("do not match"),
        "{}",
        stderr(&refused)
    );
    let (_, after) = server.call("GET", "/v1/sessions?limit=100", None).await;
    assert_eq!(
        before["sessions"].as_array().unwrap().len(),
        after["sessions"].as_array().unwrap().len()
    );
}

//! The short version of `stead bench chaos` (docs/benchmarks.md has the long one's figures):
//! 30 SIGKILLs of the real `stead serve` under the mixed workload on each backend. The bench
//! exits 1 when any check after a restart fails (an acknowledged input or event lost or
//! changed, a gap, a non-idempotent effect twice, a finished tool call without its effect, a
//! session that does not resume); this test also asserts that the workload reached every kind
//! of step, so that a run that did nothing cannot pass.

use serde_json::Value;
use stead_testkit::db;
use stead_testkit::stead::binary;

fn chaos(backend: &str, database_url: Option<String>) -> Value {
    let data = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(binary());
    command
        .args(["bench", "chaos", "--kills", "30", "--clients", "4"])
        .args(["--min-up-ms", "300", "--max-up-ms", "1500", "--json"])
        .args(["--backend", backend])
        .arg("--data-dir")
        .arg(data.path())
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn");
    if let Some(url) = database_url {
        command.args(["--database-url", &url]);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "chaos on {backend} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let run = &report["run"];
    assert_eq!(run["kills"], 30, "{report}");
    assert_eq!(run["violations"], 0, "{report}");
    let at_least_one = |path: &[&str]| {
        let value = path.iter().fold(run, |v, k| &v[*k]);
        assert!(
            value.as_u64().unwrap_or(0) > 0,
            "{}: {report}",
            path.join(".")
        );
    };
    for kind in [
        "messages_rest",
        "messages_ws",
        "approvals_rest",
        "approvals_ws",
        "cancels",
        "forks",
    ] {
        at_least_one(&["acknowledged", kind]);
    }
    for kind in ["sessions", "events", "acks", "idempotent_effects"] {
        at_least_one(&["checked", kind]);
    }
    let non_idempotent = run["checked"]["non_idempotent_effects"].as_u64().unwrap()
        + run["checked"]["in_doubt"].as_u64().unwrap();
    assert!(non_idempotent > 0, "{report}");
    report
}

#[test]
fn thirty_sigkills_on_sqlite_lose_nothing_and_repeat_nothing() {
    chaos("sqlite", None);
}

#[test]
fn thirty_sigkills_on_postgres_lose_nothing_and_repeat_nothing() {
    chaos("postgres", Some(db::postgres_admin_url()));
}

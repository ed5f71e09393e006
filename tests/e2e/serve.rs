//! `stead serve` as a real process: health and readiness over HTTP, JSON errors, graceful
//! shutdown on SIGTERM and SIGINT, on both database backends.

use serde_json::json;
use stead_testkit::client::Api;
use stead_testkit::db;
use stead_testkit::stead::Stead;

#[tokio::test]
async fn serves_health_and_readiness_on_sqlite_and_stops_on_sigterm() {
    let mut server = Stead::start("", None);
    assert!(
        server.base.starts_with("http://127.0.0.1:"),
        "loopback by default"
    );
    let (status, body) = server.call("GET", "/healthz", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") })
    );
    let (status, body) = server.call("GET", "/readyz", None).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({ "status": "ready", "database": "sqlite" }));
    let (status, body) = server.call("GET", "/no/such/path", None).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
    assert!(body["error"]["message"].is_string());
    let status = server.signal(libc::SIGTERM);
    assert!(
        status.success(),
        "graceful shutdown exits 0, got {status:?}"
    );
}

#[tokio::test]
async fn stops_cleanly_on_sigint() {
    let mut server = Stead::start("", None);
    assert_eq!(server.call("GET", "/healthz", None).await.0, 200);
    let status = server.signal(libc::SIGINT);
    assert!(status.success(), "got {status:?}");
}

#[tokio::test]
async fn readiness_follows_postgres() {
    let scratch = db::scratch_postgres("stead_serve").await;
    let name = scratch.name().to_string();
    let mut server = Stead::start("", Some(scratch.url()));
    let (status, body) = server.call("GET", "/readyz", None).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({ "status": "ready", "database": "postgres" }));

    // Take the database away under the running server: it stays up, healthy, not ready.
    scratch.drop_database().await.unwrap();
    let (status, body) = server.call("GET", "/readyz", None).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "not_ready");
    assert!(!body.to_string().contains(&name), "no internals in errors");
    assert_eq!(server.call("GET", "/healthz", None).await.0, 200);
    let status = server.signal(libc::SIGTERM);
    assert!(status.success(), "got {status:?}");
}

/// A session-token key that anyone could guess or read stops the start with one line naming
/// the file; nothing listens.
#[test]
fn refuses_a_short_or_shared_session_key() {
    use std::os::unix::fs::PermissionsExt;
    for (key, mode, expected) in [
        (vec![7u8; 5], 0o600, "5 bytes, it needs at least 32"),
        (Vec::new(), 0o600, "0 bytes, it needs at least 32"),
        (vec![7u8; 32], 0o644, "readable by others"),
    ] {
        let data = tempfile::tempdir().unwrap();
        let path = data.path().join("session.key");
        std::fs::write(&path, &key).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let mut child = stead_testkit::stead::command()
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "stead serve started with a {}-byte key of mode {mode:o}",
                    key.len()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!status.success());
        assert!(
            stderr.contains("session.key") && stderr.contains(expected),
            "{stderr}"
        );
        assert!(
            !String::from_utf8_lossy(&output.stdout).contains("listening"),
            "nothing listens"
        );
    }
}

/// Webhook secrets need not live in URLs: `headers_env` names environment variables whose
/// values become request headers. The value reaches the webhook, never `--dump-config`, and a
/// variable that is not set stops the start with a line naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_headers_come_from_the_environment() {
    use stead_testkit::upstream::{Reply, Upstream};
    let hook = stead_testkit::webhook::Webhook::start().await;
    let up = Upstream::start(
        vec![Reply::tool("notify", json!({ "text": "hi" }))],
        Reply::text("Done."),
    )
    .await;
    let config = up.config(
        "default",
        r#"model = "m""#,
        &format!(
            r#"[[agents]]
name = "ops"
route = "default"

[[agents.tools]]
name = "notify"
kind = "webhook"
url = "{}"
headers = {{ "X-Team" = "ops" }}
headers_env = {{ "Authorization" = "TEST_HOOK_TOKEN" }}
"#,
            hook.url("/notify")
        ),
    );
    let secret = "Bearer hook-secret-4242";
    let server = Stead::start_with_env(
        tempfile::tempdir().unwrap(),
        &config,
        None,
        &[("TEST_HOOK_TOKEN", secret)],
    );
    let (id, _) = server.create("ops").await;
    let (status, body) = server.say(&id, "notify the team").await;
    assert_eq!(status, 200, "{body}");
    let deliveries = hook.deliveries();
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_eq!(deliveries[0].authorization, secret);

    // The configuration shows the variable's name, not its value.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stead.toml"), &config).unwrap();
    let dumped = stead_testkit::stead::command()
        .current_dir(dir.path())
        .env("TEST_HOOK_TOKEN", secret)
        .args(["--config", "stead.toml", "--dump-config"])
        .output()
        .unwrap();
    let dumped = String::from_utf8_lossy(&dumped.stdout);
    assert!(dumped.contains("TEST_HOOK_TOKEN"), "{dumped}");
    assert!(!dumped.contains("hook-secret-4242"), "{dumped}");

    // Without the variable, the start fails naming it.
    let output = stead_testkit::stead::serve_in(dir.path())
        .env_remove("TEST_HOOK_TOKEN")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("TEST_HOOK_TOKEN") && stderr.contains("not set"),
        "{stderr}"
    );
}

//! `stead serve` as a real process: health and readiness over HTTP, JSON errors, graceful
//! shutdown on SIGTERM and SIGINT, on both database backends.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stead_persistence::scratch::ScratchDatabase;

struct Server {
    child: Child,
    base: String,
    _data: tempfile::TempDir,
}

impl Server {
    /// Starts `stead serve` on an ephemeral port and waits for its "listening" line.
    fn start(database_url: Option<&str>) -> Server {
        let data = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_stead"));
        for (name, _) in std::env::vars() {
            if name.starts_with("STEAD_") || name == "DATABASE_URL" {
                cmd.env_remove(name);
            }
        }
        if let Some(url) = database_url {
            cmd.env("DATABASE_URL", url);
        }
        let mut child = cmd
            .current_dir(data.path())
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("a listening line").unwrap();
        let base = first
            .strip_prefix("stead listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {first}"))
            .to_string();
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server {
            child,
            base,
            _data: data,
        }
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let response = reqwest::get(format!("{}{path}", self.base)).await.unwrap();
        let status = response.status().as_u16();
        let body = response.json::<Value>().await.expect("a JSON body");
        (status, body)
    }

    fn signal(&mut self, signal: i32) -> ExitStatus {
        // SAFETY: plain syscall on a child pid we own.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "server did not stop after signal {signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn serves_health_and_readiness_on_sqlite_and_stops_on_sigterm() {
    let mut server = Server::start(None);
    assert!(
        server.base.starts_with("http://127.0.0.1:"),
        "loopback by default"
    );
    let (status, body) = server.get("/healthz").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") })
    );
    let (status, body) = server.get("/readyz").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({ "status": "ready", "database": "sqlite" }));
    let (status, body) = server.get("/no/such/path").await;
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
    let mut server = Server::start(None);
    assert_eq!(server.get("/healthz").await.0, 200);
    let status = server.signal(libc::SIGINT);
    assert!(status.success(), "got {status:?}");
}

#[tokio::test]
async fn readiness_follows_postgres() {
    let admin = match std::env::var("DATABASE_URL") {
        Ok(url) if url.starts_with("postgres") => url,
        _ => panic!("needs DATABASE_URL=postgres://…; scripts/test.sh starts a throwaway server"),
    };
    let scratch = ScratchDatabase::create(&admin, "stead_serve")
        .await
        .unwrap();
    let name = scratch.name().to_string();
    let mut server = Server::start(Some(scratch.url()));
    let (status, body) = server.get("/readyz").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({ "status": "ready", "database": "postgres" }));

    // Take the database away under the running server: it stays up, healthy, not ready.
    scratch.drop_database().await.unwrap();
    let (status, body) = server.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "not_ready");
    assert!(!body.to_string().contains(&name), "no internals in errors");
    assert_eq!(server.get("/healthz").await.0, 200);
    let status = server.signal(libc::SIGTERM);
    assert!(status.success(), "got {status:?}");
}

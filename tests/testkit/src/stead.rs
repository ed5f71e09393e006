//! Runs the real `stead` binary for end-to-end tests: a data directory with a `stead.toml`, a
//! database (SQLite in the data directory unless a URL is given), the "listening" line, and
//! REST and WebSocket clients (`reqwest`, `tokio-tungstenite`). The binary is found next to the
//! test binary, as Cargo lays out its target directory ([`binary`]).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

pub use crate::client::{events, streamed_text, Api, Ws};

/// The `stead` binary Cargo built for this test run: `CARGO_BIN_EXE_stead` when Cargo sets it
/// at run time, else `…/target/debug/stead` for a test binary at `…/target/debug/deps/X` (what
/// `assert_cmd` does). Cargo builds the binary before the root package's integration tests.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_stead") {
        return PathBuf::from(path);
    }
    let test = std::env::current_exe().expect("the test binary's path");
    let mut dir = test
        .parent()
        .expect("the test binary's folder")
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(format!("stead{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "no stead binary at {} (run the tests of the root package with cargo)",
        path.display()
    );
    path
}

/// A command for the `stead` binary without the caller's configuration: inherited `STEAD_*`,
/// `OTEL_*`, `DATABASE_URL` and `RUST_LOG` are removed (tests set the layers themselves).
pub fn command() -> Command {
    let mut cmd = Command::new(binary());
    for (name, _) in std::env::vars() {
        if name.starts_with("STEAD_")
            || name.starts_with("OTEL_")
            || name == "DATABASE_URL"
            || name == "RUST_LOG"
        {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// `stead serve` on a free port with `dir/stead.toml` and `dir` as its data directory (for a
/// start that is expected to be refused: the caller runs it and reads its exit and stderr).
pub fn serve_in(dir: &std::path::Path) -> Command {
    let mut cmd = command();
    cmd.current_dir(dir)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            "stead.toml",
            "--data-dir",
        ])
        .arg(dir);
    cmd
}

/// A fresh data directory with the model and ONNX Runtime that `stead setup` prepared in
/// `$STEAD_DATA_DIR` linked in (for tests on the real local model).
pub fn prepared_data_dir() -> tempfile::TempDir {
    let prepared = PathBuf::from(
        std::env::var_os("STEAD_DATA_DIR").expect("needs STEAD_DATA_DIR prepared by `stead setup`"),
    );
    let data = tempfile::tempdir().expect("a data directory");
    for part in ["models", "runtime"] {
        std::os::unix::fs::symlink(prepared.join(part), data.path().join(part))
            .expect("link the prepared model");
    }
    data
}

/// A running `stead serve`; dropping it kills the process.
pub struct Stead {
    child: Child,
    /// `http://127.0.0.1:PORT`, from its "listening" line.
    pub base: String,
    /// Its data directory (with `stead.toml`; the SQLite database unless a URL was given).
    pub data: tempfile::TempDir,
    client: reqwest::Client,
    /// Sent as the Bearer when a call names no other credential.
    pub api_key: Option<String>,
}

impl Stead {
    /// The `/metrics` text (loopback, no key).
    pub async fn metrics(&self) -> String {
        let url = format!("{}/metrics", self.base);
        reqwest::get(url).await.unwrap().text().await.unwrap()
    }

    /// Starts `stead serve` with `config` as its `stead.toml` in a fresh data directory.
    pub fn start(config: &str, database_url: Option<&str>) -> Stead {
        let data = tempfile::tempdir().unwrap();
        Self::start_in(data, config, database_url)
    }

    /// Starts it in `data` (which may already hold a journal: a restart).
    pub fn start_in(data: tempfile::TempDir, config: &str, database_url: Option<&str>) -> Stead {
        Self::start_with_env(data, config, database_url, &[])
    }

    /// Starts it in `data` with extra environment variables.
    pub fn start_with_env(
        data: tempfile::TempDir,
        config: &str,
        database_url: Option<&str>,
        env: &[(&str, &str)],
    ) -> Stead {
        Self::start_listening(data, config, database_url, env, "127.0.0.1:0")
    }

    /// Starts it in `data` listening on `listen` (a node of a cluster must know its port
    /// before it starts: it advertises it).
    pub fn start_listening(
        data: tempfile::TempDir,
        config: &str,
        database_url: Option<&str>,
        env: &[(&str, &str)],
        listen: &str,
    ) -> Stead {
        std::fs::write(data.path().join("stead.toml"), config).unwrap();
        let mut cmd = command();
        for (name, value) in env {
            cmd.env(name, value);
        }
        if let Some(url) = database_url {
            cmd.env("DATABASE_URL", url);
        }
        let mut child = cmd
            .current_dir(data.path())
            .args(["serve", "--listen", listen, "--config", "stead.toml"])
            .arg("--data-dir")
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
        std::thread::spawn(move || for _ in lines {});
        Stead {
            child,
            base,
            data,
            client: reqwest::Client::new(),
            api_key: None,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGKILL, and wait for the process to be gone; returns the data directory.
    pub fn kill(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::replace(&mut self.data, tempfile::tempdir().unwrap())
    }

    /// Sends a signal and waits for the exit status.
    pub fn signal(&mut self, signal: i32) -> std::process::ExitStatus {
        // SAFETY: plain syscall on a child pid we own.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A raw body with a content type (for malformed input), on a connection of its own: a
    /// server that answers before reading a body it refuses closes that connection, which must
    /// not go back to the shared pool for the next request.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let mut request = client
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

#[async_trait]
impl Api for Stead {
    fn base_url(&self) -> &str {
        &self.base
    }

    fn default_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    async fn call_as(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        bearer: Option<&str>,
    ) -> (u16, Value) {
        let mut request = self
            .client
            .request(method.parse().unwrap(), format!("{}{path}", self.base));
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

impl Drop for Stead {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port (bound, then released for the caller to use at once).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

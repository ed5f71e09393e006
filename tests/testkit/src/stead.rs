//! Runs the real `stead` binary for end-to-end tests: a data directory with a `stead.toml`, a
//! database (SQLite in the data directory unless a URL is given), the "listening" line, and
//! REST and WebSocket clients (`reqwest`, `tokio-tungstenite`). The binary is found next to the
//! test binary, as Cargo lays out its target directory ([`binary`]).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

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
            .args(["serve", "--listen", "127.0.0.1:0", "--config", "stead.toml"])
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

    /// A request with the default credential; returns the status and the JSON body (`null`
    /// when the body is not JSON).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_as(method, path, body, self.api_key.as_deref())
            .await
    }

    pub async fn call_as(
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

    /// Creates a session for `agent`; returns its id and token.
    pub async fn create(&self, agent: &str) -> (String, String) {
        let (status, body) = self
            .call("POST", "/v1/sessions", Some(json!({ "agent": agent })))
            .await;
        assert_eq!(status, 201, "{body}");
        (
            body["id"].as_str().unwrap().to_string(),
            body["token"].as_str().unwrap().to_string(),
        )
    }

    /// Sends `text` to session `id` over REST and waits for the turn to settle (finished, or
    /// parked on an approval); returns the status and the session.
    pub async fn say(&self, id: &str, text: &str) -> (u16, Value) {
        self.call(
            "POST",
            &format!("/v1/sessions/{id}/messages?wait=true"),
            Some(json!({ "text": text })),
        )
        .await
    }

    /// Polls session `id` until its status is `status` (up to 10 s); returns the session.
    pub async fn wait_for_status(&self, id: &str, status: &str) -> Value {
        for _ in 0..1000 {
            let (_, session) = self.call("GET", &format!("/v1/sessions/{id}"), None).await;
            if session["status"] == status {
                return session;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("session {id} never became {status}");
    }

    /// The whole journal of a session.
    pub async fn journal(&self, id: &str) -> Vec<Value> {
        let (status, body) = self
            .call("GET", &format!("/v1/sessions/{id}/events?limit=1000"), None)
            .await;
        assert_eq!(status, 200, "{body}");
        body["events"].as_array().unwrap().clone()
    }

    /// Opens a WebSocket to the session with its token (and optional URL query extras).
    pub async fn ws(&self, id: &str, token: &str, extra: &str) -> Ws {
        let url = format!(
            "{}/v1/sessions/{id}/ws?token={token}{extra}",
            self.base.replace("http://", "ws://")
        );
        let (stream, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Ws { stream }
    }
}

impl Drop for Stead {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A WebSocket client of one session.
pub struct Ws {
    pub stream: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
}

impl Ws {
    pub async fn send(&mut self, frame: Value) {
        self.stream
            .send(Message::Text(frame.to_string().into()))
            .await
            .unwrap();
    }

    pub async fn send_text(&mut self, text: String) {
        self.stream.send(Message::Text(text.into())).await.unwrap();
    }

    /// The next JSON frame (pings and pongs skipped); `None` once the server closed.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            let message = tokio::time::timeout(Duration::from_secs(30), self.stream.next())
                .await
                .expect("a frame within 30 s")?;
            match message {
                Ok(Message::Text(text)) => return Some(serde_json::from_str(&text).unwrap()),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Frames up to and including the first event of `kind`.
    pub async fn until_event(&mut self, kind: &str) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self
                .next()
                .await
                .unwrap_or_else(|| panic!("closed before `{kind}`; saw {frames:?}"));
            let done = frame["type"] == "event" && frame["kind"] == kind;
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Frames until one of type `error`.
    pub async fn until_error(&mut self) -> Value {
        loop {
            let frame = self.next().await.expect("an error frame");
            if frame["type"] == "error" {
                return frame;
            }
        }
    }
}

/// The text a client assembled from delta frames.
pub fn streamed_text(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "delta")
        .map(|f| f["text"].as_str().unwrap())
        .collect()
}

/// The event frames, as the journal holds them (without the frame `type`).
pub fn events(frames: &[Value]) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| f["type"] == "event")
        .map(|f| {
            let mut e = f.clone();
            e.as_object_mut().unwrap().remove("type");
            e
        })
        .collect()
}

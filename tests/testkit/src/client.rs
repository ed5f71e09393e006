//! What a test does through Stead's public API, written once for both harnesses — the binary
//! ([`crate::stead::Stead`]) and the HTTP edge in process (`crate::app::App`): each provides
//! `call_as` and its address; creating sessions, messages, journals and WebSockets come from
//! here.

use std::time::Duration;

use async_trait::async_trait;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// A Stead to talk to (import it to call these methods).
#[async_trait]
pub trait Api: Sync {
    /// `http://127.0.0.1:PORT`.
    fn base_url(&self) -> &str;

    /// Sent as the Bearer when a call names no other credential.
    fn default_key(&self) -> Option<&str>;

    /// A request as `bearer`; returns the status and the JSON body (`null` when the body is
    /// not JSON).
    async fn call_as(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        bearer: Option<&str>,
    ) -> (u16, Value);

    /// A request with the default credential.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_as(method, path, body, self.default_key()).await
    }

    /// A `multipart/form-data` POST as `bearer`: each part `(name, filename, bytes)` (a file
    /// when it has a filename); returns the status, the `Content-Type` and the body as text.
    async fn post_form(
        &self,
        path: &str,
        parts: &[(&str, Option<&str>, &[u8])],
        bearer: Option<&str>,
    ) -> (u16, String, String) {
        let boundary = "stead-test-boundary-7d1f";
        let mut body = Vec::new();
        for (name, filename, bytes) in parts {
            body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            match filename {
                Some(file) => body.extend_from_slice(
                    format!(
                        "Content-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\n\
                         Content-Type: application/octet-stream\r\n\r\n"
                    )
                    .as_bytes(),
                ),
                None => body.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
                ),
            }
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        let mut request = reqwest::Client::new()
            .post(format!("{}{path}", self.base_url()))
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body);
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        let response = request.send().await.expect("the request was sent");
        let status = response.status().as_u16();
        let kind = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        (status, kind, response.text().await.unwrap_or_default())
    }

    /// Creates a session for `agent`; returns its id and token.
    async fn create(&self, agent: &str) -> (String, String) {
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
    async fn say(&self, id: &str, text: &str) -> (u16, Value) {
        self.call(
            "POST",
            &format!("/v1/sessions/{id}/messages?wait=true"),
            Some(json!({ "text": text })),
        )
        .await
    }

    /// Polls session `id` until its status is `status` (up to 10 s); returns the session.
    async fn wait_for_status(&self, id: &str, status: &str) -> Value {
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
    async fn journal(&self, id: &str) -> Vec<Value> {
        let (status, body) = self
            .call("GET", &format!("/v1/sessions/{id}/events?limit=1000"), None)
            .await;
        assert_eq!(status, 200, "{body}");
        body["events"].as_array().unwrap().clone()
    }

    /// Opens a WebSocket to the session with its token (and optional URL query extras).
    async fn ws(&self, id: &str, token: &str, extra: &str) -> Ws {
        let url = format!(
            "{}/v1/sessions/{id}/ws?token={token}{extra}",
            self.base_url().replace("http://", "ws://")
        );
        let (stream, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Ws { stream }
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

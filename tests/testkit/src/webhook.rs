//! Test double: the user's HTTP endpoint behind a webhook tool (or any service Stead posts JSON
//! to, such as an OTLP collector). It accepts `POST` on every path and records each request's
//! path, `Idempotency-Key` and JSON body; tests count effects by key. It answers with the
//! scripted statuses in order, then 200; the status 999 stands for a hang (no answer for 5 s).
//! The answer body is `{"deleted": <arguments.table>}`, what the tests' `delete_records` tool
//! returns — or, when set, a redirect ([`Webhook::redirect_to`]), a JSON body of a given
//! size ([`Webhook::answer_bytes`]) or a given JSON body ([`Webhook::answer_json`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// The scripted status that means "do not answer for 5 s".
pub const HANG: u16 = 999;

/// One request the endpoint received.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The request path, e.g. `/delete`.
    pub path: String,
    /// The `Idempotency-Key` header (empty when absent).
    pub key: String,
    /// The JSON body (`null` when the body is not JSON).
    pub body: Value,
    /// The `Authorization` header (empty when absent).
    pub authorization: String,
}

/// An answer other than the scripted status.
#[derive(Clone)]
enum Special {
    /// `307` to this location.
    Redirect(String),
    /// A JSON string of this many bytes, with a `Content-Length` or streamed without one.
    Bytes { len: usize, declared: bool },
    /// This JSON body.
    Json(Value),
}

#[derive(Default)]
struct Shared {
    statuses: Mutex<VecDeque<u16>>,
    deliveries: Mutex<Vec<Delivery>>,
    special: Mutex<Option<Special>>,
}

/// A running endpoint double; it serves until the test's runtime shuts down.
#[derive(Clone)]
pub struct Webhook {
    /// `http://127.0.0.1:PORT`, without a path.
    pub base: String,
    shared: Arc<Shared>,
}

impl Webhook {
    /// Starts on a free port, answering 200 to everything.
    pub async fn start() -> Webhook {
        Webhook::scripted(Vec::new()).await
    }

    /// Starts on a free port, answering with `statuses` in order, then 200 ([`HANG`]: no
    /// answer for 5 s).
    pub async fn scripted(statuses: Vec<u16>) -> Webhook {
        let shared = Arc::new(Shared {
            statuses: Mutex::new(statuses.into()),
            ..Shared::default()
        });
        let app = Router::new()
            .route("/", post(deliver))
            .route("/{*path}", post(deliver))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the webhook double");
        let address = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, app).await.expect("webhook double") });
        Webhook {
            base: format!("http://{address}"),
            shared,
        }
    }

    /// The URL of `path` (e.g. `/delete`) on this endpoint.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// From now on every request is answered `307 Temporary Redirect` to `location`.
    pub fn redirect_to(&self, location: &str) {
        *self.shared.special.lock().expect("special") = Some(Special::Redirect(location.into()));
    }

    /// From now on every request is answered with a JSON string of `len` bytes, with a
    /// `Content-Length` when `declared`, else streamed in 64 KiB chunks without one.
    pub fn answer_bytes(&self, len: usize, declared: bool) {
        *self.shared.special.lock().expect("special") = Some(Special::Bytes { len, declared });
    }

    /// From now on every request is answered 200 with `body` (a page the agent reads).
    pub fn answer_json(&self, body: Value) {
        *self.shared.special.lock().expect("special") = Some(Special::Json(body));
    }

    /// Every request so far, in arrival order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.shared.deliveries.lock().expect("deliveries").clone()
    }

    /// The idempotency keys of every request so far, in arrival order.
    pub fn keys(&self) -> Vec<String> {
        self.deliveries().into_iter().map(|d| d.key).collect()
    }

    /// The bodies of every request so far, in arrival order.
    pub fn bodies(&self) -> Vec<Value> {
        self.deliveries().into_iter().map(|d| d.body).collect()
    }
}

async fn deliver(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    shared
        .deliveries
        .lock()
        .expect("deliveries")
        .push(Delivery {
            path: uri.path().to_string(),
            key,
            body: body.clone(),
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string(),
        });
    let special = shared.special.lock().expect("special").clone();
    match special {
        Some(Special::Redirect(location)) => {
            return (
                StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, location)],
            )
                .into_response()
        }
        Some(Special::Bytes { len, declared }) => {
            let text = format!("\"{}\"", "a".repeat(len.saturating_sub(2)));
            if declared {
                return text.into_response();
            }
            let chunks: Vec<Result<Bytes, std::convert::Infallible>> = text
                .into_bytes()
                .chunks(64 << 10)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            return axum::body::Body::from_stream(futures_util::stream::iter(chunks))
                .into_response();
        }
        Some(Special::Json(body)) => return Json(body).into_response(),
        None => {}
    }
    let status = shared
        .statuses
        .lock()
        .expect("statuses")
        .pop_front()
        .unwrap_or(200);
    if status == HANG {
        tokio::time::sleep(Duration::from_secs(5)).await;
        return (StatusCode::OK, Json(json!({}))).into_response();
    }
    (
        StatusCode::from_u16(status).expect("a status"),
        Json(json!({ "deleted": body["arguments"]["table"] })),
    )
        .into_response()
}

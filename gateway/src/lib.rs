//! `stead-gateway` owns Stead's front door: the axum HTTP (and, later, WebSocket) server, its
//! error model, authentication and the built web UI. It holds no state of its own: sessions
//! live in the actors, durable data in `stead-persistence`.
//!
//! Today it serves the operational endpoints: `/healthz` (the process is up) and `/readyz` (the
//! database answers). A server takes its listener and its shutdown future as arguments, so tests
//! bind `127.0.0.1:0`.

mod error;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use stead_persistence::JournalStore;
use tokio::net::TcpListener;

pub use error::ApiError;

/// Everything the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn JournalStore>,
    /// Reported by `/healthz`.
    pub version: &'static str,
}

/// How long `/readyz` waits for the database before it answers "not ready".
const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// The HTTP router. Unknown paths answer a JSON 404.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves, then stops accepting connections and
/// lets requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn healthz(State(state): State<AppState>) -> Json<Value> {
    Json(json!({ "status": "ok", "version": state.version }))
}

async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    match tokio::time::timeout(READINESS_TIMEOUT, state.store.ping()).await {
        Ok(Ok(())) => Ok(Json(
            json!({ "status": "ready", "database": state.store.backend().to_string() }),
        )),
        Ok(Err(error)) => {
            tracing::warn!(error = %error, "readiness check failed");
            Err(ApiError::unavailable("the database does not answer"))
        }
        Err(_) => Err(ApiError::unavailable("the database did not answer in time")),
    }
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

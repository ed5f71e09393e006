//! `/metrics` in the Prometheus text format: HTTP requests by route, method and status with a
//! latency histogram by route (recorded by a middleware; the route is the matched path
//! template, so ids never become labels), sessions by status (from the database), live session
//! actors, WebSocket clients, and the journal's group-commit counters.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::Caller;
use crate::{ApiError, AppState, MAX_CONNECTIONS};

/// Upper bounds (seconds) of the request latency histogram.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default)]
struct Latency {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Request counters and latencies.
#[derive(Default)]
pub struct Metrics {
    /// (route, method, status) → requests.
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    /// (route, method) → latency.
    latency: Mutex<BTreeMap<(String, String), Latency>>,
}

impl Metrics {
    fn record(&self, route: String, method: String, status: u16, seconds: f64) {
        *self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((route.clone(), method.clone(), status))
            .or_default() += 1;
        let mut latency = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = latency.entry((route, method)).or_default();
        entry.count += 1;
        entry.sum += seconds;
        for (bucket, bound) in entry.buckets.iter_mut().zip(BUCKETS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
    }
}

/// Middleware: times every request under its matched route.
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = method_label(request.method()).to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    state.metrics.record(
        route,
        method,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// A request method as a label: the standard ones by name, every other token as `OTHER`.
/// Methods come from clients before any credential is checked, so they must not mint labels.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "OTHER",
    }
}

pub async fn render(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Response, ApiError> {
    caller.require_installation()?;
    let mut out = String::new();
    let counts = state.store.count_sessions().await?;
    out.push_str("# HELP stead_sessions Sessions by status.\n# TYPE stead_sessions gauge\n");
    for status in stead_persistence::SessionStatus::ALL {
        let n = counts
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n);
        let _ = writeln!(out, "stead_sessions{{status=\"{status}\"}} {n}");
    }
    let live = state.sessions.prune();
    let clients = MAX_CONNECTIONS - state.connections.available_permits();
    let journal = state.store.journal_stats();
    let _ = write!(
        out,
        "# HELP stead_session_actors_live Session actors in memory (not passivated).\n\
         # TYPE stead_session_actors_live gauge\nstead_session_actors_live {live}\n\
         # HELP stead_websocket_clients Open WebSocket connections.\n\
         # TYPE stead_websocket_clients gauge\nstead_websocket_clients {clients}\n\
         # HELP stead_journal_events_appended_total Journal events committed.\n\
         # TYPE stead_journal_events_appended_total counter\n\
         stead_journal_events_appended_total {}\n\
         # HELP stead_journal_commits_total Journal transactions committed (group commit).\n\
         # TYPE stead_journal_commits_total counter\nstead_journal_commits_total {}\n",
        journal.events, journal.commits
    );
    if let Some(mcp) = &state.mcp {
        out.push_str(&mcp.metrics());
    }
    if let Some(cluster) = &state.cluster {
        out.push_str(&cluster.metrics());
    }
    out.push_str(
        "# HELP stead_http_requests_total HTTP requests by route, method and status.\n\
         # TYPE stead_http_requests_total counter\n",
    );
    for ((route, method, status), n) in state
        .metrics
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        let _ = writeln!(
            out,
            "stead_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
        );
    }
    out.push_str(
        "# HELP stead_http_request_duration_seconds HTTP request latency by route.\n\
         # TYPE stead_http_request_duration_seconds histogram\n",
    );
    for ((route, method), latency) in state
        .metrics
        .latency
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        let labels = format!("method=\"{method}\",route=\"{route}\"");
        for (bound, n) in BUCKETS.iter().zip(latency.buckets) {
            let _ = writeln!(
                out,
                "stead_http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "stead_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}\n\
             stead_http_request_duration_seconds_sum{{{labels}}} {}\n\
             stead_http_request_duration_seconds_count{{{labels}}} {}",
            latency.count, latency.sum, latency.count
        );
    }
    out.push_str(&state.model_router.render_metrics());
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response())
}

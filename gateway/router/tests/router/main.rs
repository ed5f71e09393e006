//! The model router against upstream doubles on loopback scripted to fail (retry, TTFT
//! fallback, `Retry-After`, a stream cut mid-answer, cooldown), its cache (sequential and
//! concurrent identical calls), its limits and strict budgets. Each story is also read back
//! from the request-log records the router wrote (into an in-memory sink double).
//!
//! `anthropic`: the Anthropic provider and cross-vendor fallback; `embed`: embeddings through a route; `failover`: retries, fallback, cooldowns; `limits`: the cache, budgets, rate limits and
//! tool calls; `settle`: abandoned calls and what the log keeps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{json, Value};
use stead_router::chat::ChatMessage;
use stead_router::config::{GatewayConfig, RouteConfig};
use stead_router::log::{LogStatus, RequestLogEntry, RequestLogSink};
use stead_router::providers::openai::OpenAiProvider;
use stead_router::{
    CacheMode, CacheStatus, CallOptions, Provider, Providers, Router, RouterRequest,
};
use stead_testkit::upstream::{Reply, Upstream};

mod anthropic;
mod budgets;
mod embed;
mod failover;
mod images;
mod limits;
mod settle;

/// Test double of the request log's sink: keeps the records in memory.
#[derive(Default)]
struct MemorySink {
    records: Mutex<Vec<RequestLogEntry>>,
}

#[async_trait]
impl RequestLogSink for MemorySink {
    async fn write(
        &self,
        records: Vec<RequestLogEntry>,
    ) -> Result<(), stead_router::log::SinkError> {
        self.records.lock().unwrap().extend(records);
        Ok(())
    }
}

impl MemorySink {
    /// Waits for the batch writer, then returns the records.
    async fn records(&self, at_least: usize) -> Vec<RequestLogEntry> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let records = self.records.lock().unwrap().clone();
            if records.len() >= at_least || Instant::now() > deadline {
                return records;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

struct Setup {
    router: Arc<Router>,
    sink: Arc<MemorySink>,
}

/// A router over the given upstreams (providers `a`, `b`, …) with `routes` and `gateway` as
/// JSON in the configuration's shape.
fn router(upstreams: &[(&str, &Upstream)], routes: Value, gateway: Value) -> Setup {
    let client = reqwest::Client::new();
    let mut providers = Providers::new();
    for (name, upstream) in upstreams {
        providers.insert(
            name.to_string(),
            Some(Arc::new(OpenAiProvider::new(
                *name,
                &upstream.base_url,
                Some("test-key".into()),
                client.clone(),
            )) as Arc<dyn Provider>),
        );
    }
    let routes: Vec<RouteConfig> = serde_json::from_value(routes).unwrap();
    let gateway: GatewayConfig = serde_json::from_value(gateway).unwrap();
    let sink = Arc::new(MemorySink::default());
    let router = Router::new(
        &routes,
        gateway,
        &providers,
        Some(sink.clone() as Arc<dyn RequestLogSink>),
    )
    .unwrap();
    Setup {
        router: Arc::new(router),
        sink,
    }
}

fn ask(route: &str, text: &str) -> RouterRequest {
    RouterRequest {
        route: route.into(),
        messages: vec![ChatMessage::user(text)],
        ..Default::default()
    }
}

/// A streamed call: the text the caller received, and the result.
async fn stream(
    router: &Router,
    request: RouterRequest,
    options: CallOptions,
) -> (
    String,
    Result<stead_router::RouterResponse, stead_router::RouterError>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let result = router.call(request, options, Some(tx)).await;
    let mut text = String::new();
    while let Ok(piece) = rx.try_recv() {
        text.push_str(&piece);
    }
    (text, result)
}

fn fast_retry(attempts: u32) -> Value {
    json!({ "attempts": attempts, "base_ms": 10, "max_ms": 20, "jitter": false })
}

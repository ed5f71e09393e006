//! `stead-router` is Stead's AI gateway: the model router, one API over the local engine and
//! any number of OpenAI-compatible and Anthropic providers. A call names a route; the route's targets are
//! tried in order (or in a weighted random order), each retried on the failures its rules name
//! with backoff (honouring `Retry-After`), under a total deadline and a time-to-first-token
//! deadline; a target that keeps failing cools down (a circuit breaker shared by every route
//! that uses it). A stream that breaks after some text continues on the next attempt from that
//! text, so the caller sees one answer. Answers may be cached (exact match, concurrent identical
//! calls coalesced into one); calls are limited per API key and per route, and every call
//! becomes one request-log record. Embeddings (`Router::embed`) go the same way: a route's
//! targets in order, with retries, breakers, limits, budgets, the cache and the log.
//!
//! It owns OpenAI's chat completions format ([`completions`]: parsed requests, answers and
//! stream chunks, both ways), the remote providers ([`providers`]: OpenAI-compatible and
//! Anthropic), the `[gateway]`/`[[routes]]` configuration
//! ([`config`]) and the request log's records ([`log`]). It knows nothing of sessions, HTTP
//! serving, storage or ONNX Runtime: the local engine registers itself as a provider
//! (`stead_inference::provider`) and the request log goes to a sink trait, both wired by the
//! binary.

pub mod answer;
mod attempt;
mod breaker;
mod cache;
mod call;
pub use stead_model::chat;
pub mod completions;
pub mod config;
mod embed;
mod failover;
mod guard;
mod key_limits;
mod limits;
pub mod log;
mod metrics;
pub use stead_model::provider;
pub mod providers;
mod route;
mod settle;
mod spend;
mod transcribe;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use uuid::Uuid;

use self::breaker::Breaker;
use self::cache::Answer;
use self::config::{GatewayConfig, RouteConfig};
pub use self::embed::{EmbedRequest, EmbedResponse};
pub use self::limits::{
    BudgetAlert, BudgetAlerts, BudgetDirectory, BudgetLimit, KeyRates, LedgerError, SharedLedger,
    SharedReservation, NO_RESET,
};
use self::limits::{Budgets, RequestRate, TokenRate};
use self::log::{AttemptRecord, RequestLog, RequestLogSink};
use self::metrics::RouterMetrics;
pub use self::provider::{
    Chunk, EmbedReply, FailureKind, Params, Provider, ProviderCall, ProviderError, ProviderMetric,
    ProviderReply, RouterRequest,
};
use self::route::{Route, Target};
pub use self::transcribe::{TranscribeRequest, TranscribeResponse};
use crate::chat::{FinishReason, ToolCall, Usage};

/// `max_tokens` assumed for a budget reservation when neither the caller nor the target sets
/// one; the call is then sent with this `max_tokens`, so it cannot cost more than reserved.
pub const BUDGET_MAX_TOKENS: u32 = 4096;

/// Whether a call may be answered from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    #[default]
    Use,
    /// Neither read nor written (the `x-stead-cache: bypass` header).
    Bypass,
}

/// What the cache did for a call (the `x-stead-cache` response header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    Hit,
    Miss,
    Bypass,
    /// Caching is off for this route.
    Off,
}

impl CacheStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::Miss => "miss",
            CacheStatus::Bypass => "bypass",
            CacheStatus::Off => "off",
        }
    }
}

/// Who calls and how.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The request id (a fresh time-ordered one when unset).
    pub request_id: Option<Uuid>,
    /// The session whose actor calls (`gen_ai.conversation.id`).
    pub session_id: Option<Uuid>,
    /// The API key's name, for per-key limits and budgets (`None`: session actors, which the
    /// per-route limits still cover).
    pub api_key: Option<String>,
    /// Up to 16 string/number/bool entries, kept with the log record.
    pub metadata: Map<String, Value>,
    pub cache: CacheMode,
    /// A one-off overspend a person approved for this call (USD): each of the key's and its
    /// project's budgets admits it up to their amount plus this (docs/tenancy.md, "Budget
    /// approvals"). The installation's own per-key budget takes no grant.
    pub budget_grant_usd: Option<f64>,
}

/// A finished call.
#[derive(Debug, Clone)]
pub struct RouterResponse {
    pub id: Uuid,
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: FinishReason,
    pub usage: Usage,
    /// The provider and model of the target that answered.
    pub provider: String,
    pub model: String,
    /// The answering provider's kind (`openai`, `onnx`): OpenTelemetry's
    /// `gen_ai.provider.name`.
    pub system: String,
    pub cache: CacheStatus,
    pub attempts: Vec<AttemptRecord>,
    pub latency: Duration,
    pub ttft: Option<Duration>,
    pub cost: f64,
    /// The route's guardrails that acted on the call (its request and this answer), in order.
    pub guardrails: Vec<stead_model::log::GuardrailEntry>,
}

/// Why a call was not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouterErrorCode {
    /// No route of that name.
    UnknownRoute,
    /// A per-key or per-route rate limit.
    RateLimited,
    /// The key's strict budget is spent or reserved.
    BudgetExceeded,
    /// Every target failed.
    UpstreamFailed,
    /// The last target refused the request as invalid.
    UpstreamRejected,
    /// No target is available (none configured and ready, or all cooling down).
    Unavailable,
    /// A `block` guardrail of the route found what it looks for (docs/guardrails.md).
    GuardrailBlocked,
    /// The request shows images and no model of the route sees them (docs/multimodal.md).
    ImagesUnsupported,
    /// The key may not make this kind of call (a transcription through a route while it has
    /// a budget: docs/speech.md).
    Forbidden,
}

impl RouterErrorCode {
    /// The code as callers and the request log see it.
    pub fn as_str(self) -> &'static str {
        match self {
            RouterErrorCode::UnknownRoute => "unknown_route",
            RouterErrorCode::RateLimited => "rate_limited",
            RouterErrorCode::BudgetExceeded => "budget_exceeded",
            RouterErrorCode::UpstreamFailed => "upstream_failed",
            RouterErrorCode::UpstreamRejected => "upstream_rejected",
            RouterErrorCode::Unavailable => "unavailable",
            RouterErrorCode::GuardrailBlocked => "guardrail_blocked",
            RouterErrorCode::ImagesUnsupported => "images_unsupported",
            RouterErrorCode::Forbidden => "forbidden",
        }
    }

    /// A refusal by the router's own limits (no target was tried).
    pub fn is_limit(self) -> bool {
        matches!(
            self,
            RouterErrorCode::RateLimited | RouterErrorCode::BudgetExceeded
        )
    }
}

impl std::fmt::Display for RouterErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for RouterErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for RouterErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A call that was not answered.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterError {
    pub id: Uuid,
    pub code: RouterErrorCode,
    pub message: String,
    /// `message` without the provider's own words, when it quotes them (an upstream's error
    /// text): what a session journals (`model_call_failed`), where the session's token holder
    /// and the model read it. The request log and the router's direct callers get `message`.
    pub unquoted: Option<String>,
    pub retry_after: Option<Duration>,
    pub attempts: Vec<AttemptRecord>,
    /// The budget that refused the call, when a key's or a project's did (`budget_exceeded`).
    /// Boxed: errors travel in every `Result` of the router, most without one.
    pub budget: Option<Box<RefusedBudget>>,
}

/// A key's or a project's budget that did not fit a call.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusedBudget {
    /// The ledger's key (`budget:key:{id}`, `budget:project:{id}`).
    pub key: String,
    /// How people name it (``key `ci` ``).
    pub name: String,
    /// The budget in USD for its window.
    pub usd: f64,
    pub spent: f64,
    pub reserved: f64,
    /// The most the refused call may cost.
    pub amount: f64,
}

impl RefusedBudget {
    /// How much more the budget would need for the call to fit (USD).
    pub fn shortfall(&self) -> f64 {
        (self.spent + self.reserved + self.amount - self.usd).max(0.0)
    }
}

impl RouterError {
    /// The message a session may journal: `message` without the provider's own words.
    pub fn for_session(&self) -> &str {
        self.unquoted.as_deref().unwrap_or(&self.message)
    }
}

impl std::fmt::Display for RouterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The router.
pub struct Router {
    routes: HashMap<String, Route>,
    gateway: GatewayConfig,
    cache: Option<moka::future::Cache<[u8; 32], Arc<Answer>>>,
    /// Cached embeddings (`/v1/embeddings`), under the same settings as answers.
    embed_cache: Option<moka::future::Cache<[u8; 32], Arc<embed::Embedded>>>,
    key_requests: Option<RequestRate>,
    key_tokens: Option<TokenRate>,
    /// Virtual keys' own rates, from the directory.
    key_limits: key_limits::KeyLimits,
    /// The configured guardrails the routes name (`[[guardrails]]`).
    guardrails: stead_guardrails::Guardrails,
    /// What the guardrails' model checks said of each text they were asked about.
    verdicts: stead_guardrails::judge::VerdictCache,
    budgets: Option<Budgets>,
    /// Budgets beyond the installation's: a virtual key's and its project's.
    directory: Option<spend::Directory>,
    log: Option<RequestLog>,
    metrics: RouterMetrics,
    /// Every available provider, by name (for their own figures on `/metrics`).
    providers: Vec<(String, Arc<dyn Provider>)>,
}

/// A route's targets, by provider name, as the router is built from configuration.
pub type Providers = HashMap<String, Option<Arc<dyn Provider>>>;

impl Router {
    /// Builds the router. `providers` maps every configured provider name to the provider, or
    /// `None` when it is configured but not available; routes naming an unknown provider are a
    /// configuration error. The request log (when a sink is given) starts its writer task, so
    /// this runs inside a tokio runtime.
    pub fn new(
        routes: &[RouteConfig],
        gateway: GatewayConfig,
        providers: &Providers,
        sink: Option<Arc<dyn RequestLogSink>>,
    ) -> Result<Router, RouterConfigError> {
        if let Some(problem) = gateway.problem() {
            return Err(RouterConfigError::Gateway(problem));
        }
        let mut breakers: HashMap<(String, String), Arc<Breaker>> = HashMap::new();
        let mut built = HashMap::new();
        for (i, route) in routes.iter().enumerate() {
            if let Some(problem) = route.problem() {
                return Err(RouterConfigError::Route { index: i, problem });
            }
            let mut targets = Vec::new();
            for (j, target) in route.targets.iter().enumerate() {
                let provider = providers.get(&target.provider).ok_or_else(|| {
                    RouterConfigError::UnknownProvider {
                        route: i,
                        target: j,
                        provider: target.provider.clone(),
                    }
                })?;
                let breaker = breakers
                    .entry((target.provider.clone(), target.model.clone()))
                    .or_default()
                    .clone();
                let price = gateway
                    .prices
                    .get(&format!("{}/{}", target.provider, target.model))
                    .or_else(|| gateway.prices.get(&target.model))
                    .copied()
                    .unwrap_or_default();
                let images = route.images.unwrap_or_else(|| {
                    provider
                        .as_ref()
                        .is_some_and(|p| p.sees_images(&target.model))
                });
                targets.push(Target {
                    images,
                    provider_name: target.provider.clone(),
                    provider: provider.clone(),
                    model: target.model.clone(),
                    config: target.clone(),
                    breaker,
                    price,
                });
            }
            built.insert(
                route.name.clone(),
                Route {
                    weighted: route.targets.iter().any(|t| t.weight.is_some()),
                    targets,
                    cache: route.cache,
                    requests: route.requests_per_min.map(RequestRate::direct),
                    tokens: route.tokens_per_min.map(TokenRate::new),
                    guardrails: route.guardrails.clone(),
                },
            );
        }
        let cache = gateway.cache.enabled.then(|| {
            moka::future::Cache::builder()
                .max_capacity(gateway.cache.max_entries)
                .time_to_live(Duration::from_secs(gateway.cache.ttl_secs))
                .build()
        });
        let embed_cache = gateway.cache.enabled.then(|| {
            moka::future::Cache::builder()
                .max_capacity(gateway.cache.max_entries)
                .time_to_live(Duration::from_secs(gateway.cache.ttl_secs))
                .build()
        });
        let limits = &gateway.limits;
        Ok(Router {
            routes: built,
            cache,
            embed_cache,
            key_requests: limits.requests_per_min.map(RequestRate::keyed),
            key_tokens: limits.tokens_per_min.map(TokenRate::new),
            key_limits: Default::default(),
            guardrails: Default::default(),
            verdicts: Default::default(),
            budgets: limits
                .budget_usd
                .map(|budget| Budgets::new(budget, limits.budget_window())),
            directory: None,
            log: match (sink, gateway.log.enabled) {
                (Some(sink), true) => Some(RequestLog::start(sink, &gateway.log)),
                _ => None,
            },
            metrics: RouterMetrics::default(),
            providers: {
                let mut available: Vec<(String, Arc<dyn Provider>)> = providers
                    .iter()
                    .filter_map(|(name, p)| p.clone().map(|p| (name.clone(), p)))
                    .collect();
                available.sort_by(|a, b| a.0.cmp(&b.0));
                available
            },
            gateway,
        })
    }

    /// Keeps the strict budgets (`[gateway.limits] budget_usd`) in `ledger` — the database
    /// a cluster's nodes share — instead of this process.
    pub fn with_shared_budgets(mut self, ledger: Arc<dyn SharedLedger>) -> Self {
        self.budgets = self.budgets.map(|budgets| budgets.shared(ledger));
        self
    }

    /// Budgets beyond the installation's: the ones `directory` names for a call's key (a
    /// virtual key's own, its project's), kept in `ledger` — the database, so that they hold
    /// across restarts and on every node (docs/tenancy.md).
    pub fn with_budget_directory(
        mut self,
        directory: Arc<dyn BudgetDirectory>,
        ledger: Arc<dyn SharedLedger>,
    ) -> Self {
        self.directory = Some(spend::Directory {
            budgets: directory,
            ledger,
            alerts: None,
        });
        self
    }

    /// Sends the alert of a key's or a project's budget (those with an `alert_usd`) to
    /// `alerts` when its spending crosses it (docs/tenancy.md, "Budget alerts"); needs
    /// [`Router::with_budget_directory`] first.
    pub fn with_budget_alerts(mut self, alerts: Arc<dyn BudgetAlerts>) -> Self {
        if let Some(directory) = &mut self.directory {
            directory.alerts = Some(alerts);
        }
        self
    }

    /// The prompt tokens `request` would take on its route's first available target, and that
    /// model's context window, when the target's provider can tell (the local engine); `None`
    /// otherwise (no such route, or a remote provider).
    pub fn measure(&self, request: &RouterRequest) -> Option<(u64, u64)> {
        let route = self.routes.get(&request.route)?;
        let target = route.targets.iter().find(|t| t.provider.is_some())?;
        target.provider.as_ref()?.measure(&target.model, request)
    }

    /// The route names, sorted.
    /// Whether some model of `route` sees images (`None`: no such route).
    pub fn route_sees_images(&self, route: &str) -> Option<bool> {
        self.routes
            .get(route)
            .map(|r| r.targets.iter().any(|t| t.images))
    }

    pub fn route_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.routes.keys().cloned().collect();
        names.sort();
        names
    }

    /// The router's Prometheus histograms, the request log's counters, the providers' own
    /// figures and the guardrails' acts.
    pub fn render_metrics(&self) -> String {
        let mut out = self.metrics.render();
        let figures: Vec<(String, ProviderMetric)> = self
            .providers
            .iter()
            .flat_map(|(name, p)| p.metrics().into_iter().map(|m| (name.clone(), m)))
            .collect();
        metrics::render_provider_metrics(&mut out, &figures);
        if let Some(log) = &self.log {
            out.push_str(&format!(
                "# HELP stead_gateway_log_records_total Request-log records by fate\n\
                 # TYPE stead_gateway_log_records_total counter\n\
                 stead_gateway_log_records_total{{fate=\"written\"}} {}\n\
                 stead_gateway_log_records_total{{fate=\"dropped\"}} {}\n",
                log.written(),
                log.dropped()
            ));
        }
        out.push_str(&stead_guardrails::metrics::render());
        out
    }
}

/// A gateway or route configuration the router cannot be built from; the message names the
/// key (`routes[2].targets[0].provider: …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouterConfigError {
    #[error("gateway.{0}")]
    Gateway(String),
    #[error("routes[{index}].{problem}")]
    Route { index: usize, problem: String },
    #[error("routes[{route}].targets[{target}].provider: no provider is named `{provider}`")]
    UnknownProvider {
        route: usize,
        target: usize,
        provider: String,
    },
}

/// Checks `x-stead-metadata`: a JSON object of up to 16 string, number or bool entries.
pub fn parse_metadata(text: &str) -> Result<Map<String, Value>, completions::FormatError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("x-stead-metadata is not JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err("x-stead-metadata must be a JSON object".into());
    };
    if map.len() > 16 {
        return Err("x-stead-metadata holds at most 16 entries".into());
    }
    for (key, value) in &map {
        if key.is_empty() || key.len() > 64 {
            return Err("x-stead-metadata keys must have 1 to 64 characters".into());
        }
        match value {
            Value::String(s) if s.len() <= 256 => {}
            Value::Number(_) | Value::Bool(_) => {}
            _ => {
                return Err(format!(
                "x-stead-metadata `{key}` must be a string (up to 256 bytes), a number or a bool"
            )
                .into())
            }
        }
    }
    Ok(map)
}

impl Router {
    /// Waits until every request-log record queued so far is written.
    pub async fn flush_log(&self) {
        if let Some(log) = &self.log {
            log.flush().await;
        }
    }
}

/// The entries of a session's metadata that a request-log row keeps: those `x-stead-metadata`
/// would accept (a key of 1 to 64 characters; a string of up to 256 bytes, a number or a
/// bool), the first 16 in key order. Nested values (e.g. a fork's `forked_from`) are left out.
pub fn log_metadata(metadata: &Map<String, Value>) -> Map<String, Value> {
    let mut entries: Vec<(&String, &Value)> = metadata
        .iter()
        .filter(|(key, value)| {
            (1..=64).contains(&key.len())
                && match value {
                    Value::String(s) => s.len() <= 256,
                    Value::Number(_) | Value::Bool(_) => true,
                    _ => false,
                }
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
        .into_iter()
        .take(16)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests;

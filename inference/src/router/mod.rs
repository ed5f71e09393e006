//! The model router: one API over the local engine and any number of OpenAI-compatible
//! providers. A call names a route; the route's targets are tried in order (or in a weighted
//! random order), each retried on the failures its rules name with backoff (honouring
//! `Retry-After`), under a total deadline and a time-to-first-token deadline; a target that keeps
//! failing cools down (a circuit breaker shared by every route that uses it). A stream that
//! breaks after some text continues on the next attempt from that text, so the caller sees one
//! answer. Answers may be cached (exact match, concurrent identical calls coalesced into one);
//! calls are limited per API key and per route, and every call becomes one request-log record.

pub mod config;
mod limits;
pub mod log;
mod metrics;
pub mod onnx;
pub mod openai;
pub mod provider;
pub mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc::{self, UnboundedSender};
use tracing::Instrument;
use uuid::Uuid;

use self::config::{GatewayConfig, Price, RouteConfig, TargetConfig};
use self::limits::{Budgets, RequestRate, TokenRate};
use self::log::{AttemptRecord, LogRecord, RequestLog, RequestLogSink};
use self::metrics::{Observation, RouterMetrics};
pub use self::provider::{
    Chunk, FailureKind, Params, Provider, ProviderCall, ProviderError, ProviderReply, RouterRequest,
};
use crate::{FinishReason, ToolCall, Usage};

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
}

/// A call that was not answered.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterError {
    pub id: Uuid,
    /// `unknown_route`, `rate_limited`, `budget_exceeded`, `upstream_failed`,
    /// `upstream_rejected` (the last target refused the request as invalid), `unavailable`.
    pub code: &'static str,
    pub message: String,
    pub retry_after: Option<Duration>,
    pub attempts: Vec<AttemptRecord>,
}

impl std::fmt::Display for RouterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A circuit breaker for one provider's model, shared by every route that uses it.
#[derive(Debug, Default)]
struct Breaker {
    state: Mutex<BreakerState>,
}

#[derive(Debug, Default)]
struct BreakerState {
    consecutive_failures: u32,
    open_until: Option<Instant>,
    /// After the cooldown, one call tries the target again; others keep skipping it until
    /// that trial ends.
    trial_running: bool,
}

impl Breaker {
    /// May an attempt go to this target now? (Takes the half-open trial when it is due.)
    fn allow(&self) -> bool {
        let mut state = self.state.lock().expect("breaker");
        match state.open_until {
            None => true,
            Some(until) if Instant::now() < until => false,
            Some(_) if state.trial_running => false,
            Some(_) => {
                state.trial_running = true;
                true
            }
        }
    }

    fn is_open(&self) -> bool {
        let state = self.state.lock().expect("breaker");
        state.open_until.is_some_and(|until| Instant::now() < until) || state.trial_running
    }

    fn success(&self) {
        *self.state.lock().expect("breaker") = BreakerState::default();
    }

    fn failure(&self, threshold: u32, cooldown: Duration) {
        let mut state = self.state.lock().expect("breaker");
        state.consecutive_failures += 1;
        if state.trial_running || state.consecutive_failures >= threshold {
            state.open_until = Some(Instant::now() + cooldown);
            state.trial_running = false;
            tracing::warn!(
                failures = state.consecutive_failures,
                cooldown_s = cooldown.as_secs_f64(),
                "a model target is cooling down"
            );
        }
    }
}

struct Target {
    provider_name: String,
    /// `None`: configured but not available (an unprepared local model).
    provider: Option<Arc<dyn Provider>>,
    model: String,
    config: TargetConfig,
    breaker: Arc<Breaker>,
    price: Price,
}

struct Route {
    targets: Vec<Target>,
    weighted: bool,
    cache: bool,
    requests: Option<RequestRate>,
    tokens: Option<TokenRate>,
}

impl Route {
    /// The order to try the targets in: as configured, or a weighted random permutation.
    fn order(&self) -> Vec<&Target> {
        if !self.weighted {
            return self.targets.iter().collect();
        }
        let mut left: Vec<&Target> = self.targets.iter().collect();
        let mut order = Vec::with_capacity(left.len());
        let mut rng = rand::rng();
        while !left.is_empty() {
            let total: u64 = left
                .iter()
                .map(|t| t.config.weight.unwrap_or(1) as u64)
                .sum();
            let mut pick = rng.random_range(0..total);
            let mut index = 0;
            for (i, t) in left.iter().enumerate() {
                let weight = t.config.weight.unwrap_or(1) as u64;
                if pick < weight {
                    index = i;
                    break;
                }
                pick -= weight;
            }
            order.push(left.remove(index));
        }
        order
    }

    /// The most a call through this route may cost: every target's price at the request's
    /// token bounds.
    fn most_expensive(&self) -> Price {
        self.targets.iter().fold(Price::default(), |most, t| Price {
            input: most.input.max(t.price.input),
            output: most.output.max(t.price.output),
        })
    }
}

/// An answer as the cache keeps it.
#[derive(Debug, Clone)]
struct Answer {
    text: String,
    tool_calls: Vec<ToolCall>,
    finish_reason: FinishReason,
    usage: Usage,
    provider: String,
    model: String,
    system: String,
}

/// What the call that ran the targets learned, beyond the answer.
#[derive(Debug, Default)]
struct Execution {
    attempts: Vec<AttemptRecord>,
    ttft: Option<Duration>,
    cost: f64,
    /// Whether this call ran the targets (not answered by an identical call's run).
    ran: bool,
}

/// The router.
pub struct Router {
    routes: HashMap<String, Route>,
    gateway: GatewayConfig,
    cache: Option<moka::future::Cache<[u8; 32], Arc<Answer>>>,
    key_requests: Option<RequestRate>,
    key_tokens: Option<TokenRate>,
    budgets: Option<Budgets>,
    log: Option<RequestLog>,
    metrics: RouterMetrics,
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
    ) -> Result<Router, String> {
        if let Some(problem) = gateway.problem() {
            return Err(format!("gateway.{problem}"));
        }
        let mut breakers: HashMap<(String, String), Arc<Breaker>> = HashMap::new();
        let mut built = HashMap::new();
        for (i, route) in routes.iter().enumerate() {
            if let Some(problem) = route.problem() {
                return Err(format!("routes[{i}].{problem}"));
            }
            let mut targets = Vec::new();
            for (j, target) in route.targets.iter().enumerate() {
                let provider = providers.get(&target.provider).ok_or_else(|| {
                    format!(
                        "routes[{i}].targets[{j}].provider: no provider is named `{}`",
                        target.provider
                    )
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
                targets.push(Target {
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
                },
            );
        }
        let cache = gateway.cache.enabled.then(|| {
            moka::future::Cache::builder()
                .max_capacity(gateway.cache.max_entries)
                .time_to_live(Duration::from_secs(gateway.cache.ttl_secs))
                .build()
        });
        let limits = &gateway.limits;
        Ok(Router {
            routes: built,
            cache,
            key_requests: limits.requests_per_min.map(RequestRate::keyed),
            key_tokens: limits.tokens_per_min.map(TokenRate::new),
            budgets: limits
                .budget_usd
                .map(|budget| Budgets::new(budget, limits.budget_window())),
            log: match (sink, gateway.log.enabled) {
                (Some(sink), true) => Some(RequestLog::start(sink, &gateway.log)),
                _ => None,
            },
            metrics: RouterMetrics::default(),
            gateway,
        })
    }

    /// The route names, sorted.
    pub fn route_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.routes.keys().cloned().collect();
        names.sort();
        names
    }

    /// The router's Prometheus histograms, plus the request log's counters.
    pub fn render_metrics(&self) -> String {
        let mut out = self.metrics.render();
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
        out
    }

    /// Runs one chat completion. With `deltas`, the answer's text is streamed into it as it
    /// arrives (one continuous text even across failover). Dropping the future abandons the
    /// call (its attempt is stopped); no record is written for an abandoned call.
    pub async fn call(
        &self,
        request: RouterRequest,
        options: CallOptions,
        deltas: Option<UnboundedSender<String>>,
    ) -> Result<RouterResponse, RouterError> {
        let id = options.request_id.unwrap_or_else(Uuid::now_v7);
        let started = Instant::now();
        let at = chrono::Utc::now();
        let stream = deltas.is_some();
        let span = tracing::info_span!(
            "chat",
            "otel.name" = format!("chat {}", request.route),
            "otel.kind" = "client",
            "gen_ai.operation.name" = "chat",
            "gen_ai.request.model" = %request.route,
            "gen_ai.provider.name" = tracing::field::Empty,
            "stead.provider" = tracing::field::Empty,
            "gen_ai.response.model" = tracing::field::Empty,
            "gen_ai.response.id" = %id,
            "gen_ai.usage.input_tokens" = tracing::field::Empty,
            "gen_ai.usage.output_tokens" = tracing::field::Empty,
            "gen_ai.response.finish_reasons" = tracing::field::Empty,
            "gen_ai.conversation.id" = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
        );
        if let Some(session) = options.session_id {
            span.record("gen_ai.conversation.id", session.to_string());
        }
        let result = self
            .run(id, request.clone(), &options, deltas, started)
            .instrument(span.clone())
            .await;
        let latency = started.elapsed();
        let (record, observation_ok) = match &result {
            Ok(response) => {
                span.record("gen_ai.provider.name", response.system.as_str());
                span.record("stead.provider", response.provider.as_str());
                span.record("gen_ai.response.model", response.model.as_str());
                span.record(
                    "gen_ai.usage.input_tokens",
                    response.usage.prompt_tokens as i64,
                );
                span.record(
                    "gen_ai.usage.output_tokens",
                    response.usage.completion_tokens as i64,
                );
                span.record(
                    "gen_ai.response.finish_reasons",
                    format!("[\"{}\"]", wire::finish_reason_str(response.finish_reason)),
                );
                let hit = response.cache == CacheStatus::Hit;
                (
                    LogRecord {
                        id,
                        at,
                        session_id: options.session_id,
                        api_key: options.api_key.clone(),
                        route: request.route.clone(),
                        provider: Some(response.provider.clone()),
                        model: Some(response.model.clone()),
                        status: "ok".into(),
                        attempts: response.attempts.clone(),
                        latency_ms: millis(latency),
                        ttft_ms: response.ttft.map(millis),
                        tokens_in: if hit {
                            0
                        } else {
                            response.usage.prompt_tokens as u64
                        },
                        tokens_out: if hit {
                            0
                        } else {
                            response.usage.completion_tokens as u64
                        },
                        cost: response.cost,
                        cache_hit: hit,
                        stream,
                        metadata: options.metadata.clone(),
                        error: None,
                    },
                    !hit,
                )
            }
            Err(error) => {
                span.record("error.type", error.code);
                let last = error.attempts.last();
                (
                    LogRecord {
                        id,
                        at,
                        session_id: options.session_id,
                        api_key: options.api_key.clone(),
                        route: request.route.clone(),
                        provider: last.map(|a| a.provider.clone()),
                        model: last.map(|a| a.model.clone()),
                        status: match error.code {
                            "rate_limited" | "budget_exceeded" => error.code.to_string(),
                            _ => "error".to_string(),
                        },
                        attempts: error.attempts.clone(),
                        latency_ms: millis(latency),
                        ttft_ms: None,
                        tokens_in: 0,
                        tokens_out: 0,
                        cost: 0.0,
                        cache_hit: false,
                        stream,
                        metadata: options.metadata.clone(),
                        error: Some(error.message.clone()),
                    },
                    false,
                )
            }
        };
        if let Ok(response) = &result {
            if observation_ok {
                self.metrics.observe(&Observation {
                    route: &request.route,
                    provider: &response.provider,
                    model: &response.model,
                    ok: true,
                    duration_s: latency.as_secs_f64(),
                    ttft_s: response.ttft.map(|t| t.as_secs_f64()),
                    input_tokens: response.usage.prompt_tokens as u64,
                    output_tokens: response.usage.completion_tokens as u64,
                });
            }
        } else if let Err(error) = &result {
            if !error.attempts.is_empty() {
                let last = error.attempts.last().expect("not empty");
                self.metrics.observe(&Observation {
                    route: &request.route,
                    provider: &last.provider,
                    model: &last.model,
                    ok: false,
                    duration_s: latency.as_secs_f64(),
                    ttft_s: None,
                    input_tokens: 0,
                    output_tokens: 0,
                });
            }
        }
        if let Some(log) = &self.log {
            log.record(record);
        }
        result
    }

    async fn run(
        &self,
        id: Uuid,
        mut request: RouterRequest,
        options: &CallOptions,
        deltas: Option<UnboundedSender<String>>,
        started: Instant,
    ) -> Result<RouterResponse, RouterError> {
        let refuse =
            |code: &'static str, message: String, retry_after: Option<Duration>| RouterError {
                id,
                code,
                message,
                retry_after,
                attempts: Vec::new(),
            };
        let Some(route) = self.routes.get(&request.route) else {
            return Err(refuse(
                "unknown_route",
                format!(
                    "no route is named `{}` (the routes: {})",
                    request.route,
                    self.route_names().join(", ")
                ),
                None,
            ));
        };
        let key = options.api_key.as_deref();
        let over = |who: String, limit: &'static str| {
            move |wait| {
                refuse(
                    "rate_limited",
                    format!("{who} is over its {limit}"),
                    Some(wait),
                )
            }
        };
        let route_name = format!("route `{}`", request.route);
        // Requests per minute: the key's, then the route's.
        if let (Some(rate), Some(key)) = (&self.key_requests, key) {
            rate.check(key)
                .map_err(over(format!("API key `{key}`"), "requests per minute"))?;
        }
        if let Some(rate) = &route.requests {
            rate.check("")
                .map_err(over(route_name.clone(), "requests per minute"))?;
        }
        // The cache: a hit costs nothing and is not limited by tokens or budgets.
        let cache = match (&self.cache, route.cache, options.cache) {
            (Some(_), true, CacheMode::Bypass) => CacheStatus::Bypass,
            (Some(cache), true, CacheMode::Use) => {
                let key = cache_key(&request);
                if let Some(answer) = cache.get(&key).await {
                    return Ok(self.hit(id, &answer, deltas, started));
                }
                CacheStatus::Miss
            }
            _ => CacheStatus::Off,
        };
        // Tokens per minute: a call starts while the balance is positive.
        if let (Some(rate), Some(key)) = (&self.key_tokens, key) {
            rate.check(key)
                .map_err(over(format!("API key `{key}`"), "tokens per minute"))?;
        }
        if let Some(rate) = &route.tokens {
            rate.check("")
                .map_err(over(route_name, "tokens per minute"))?;
        }
        // The budget: reserve the most this call can cost.
        let reservation = match (&self.budgets, key) {
            (Some(budgets), Some(key)) => {
                if request.params.max_tokens.is_none()
                    && route.targets.iter().any(|t| t.config.max_tokens.is_none())
                {
                    request.params.max_tokens = Some(BUDGET_MAX_TOKENS);
                }
                let most = route.most_expensive();
                let prompt = prompt_bound(&request) as f64;
                let completion = request
                    .params
                    .max_tokens
                    .into_iter()
                    .chain(route.targets.iter().filter_map(|t| t.config.max_tokens))
                    .max()
                    .unwrap_or(BUDGET_MAX_TOKENS) as f64;
                let amount = (most.input * prompt + most.output * completion) / 1e6;
                Some(budgets.reserve(key, amount).map_err(|refused| {
                    refuse(refused.code, refused.message, Some(refused.retry_after))
                })?)
            }
            _ => None,
        };
        let outcome = match (&self.cache, cache) {
            (Some(store), CacheStatus::Miss) => {
                let execution = Arc::new(Mutex::new(Execution::default()));
                let ran = execution.clone();
                let hit_deltas = deltas.clone();
                let answer = store
                    .try_get_with(cache_key(&request), async {
                        let mut exec = Execution {
                            ran: true,
                            ..Default::default()
                        };
                        let result = self.execute(id, route, &request, deltas, &mut exec).await;
                        *ran.lock().expect("execution") = exec;
                        result.map(Arc::new)
                    })
                    .await;
                let exec = std::mem::take(&mut *execution.lock().expect("execution"));
                match answer {
                    Ok(answer) if exec.ran => Ok((answer.as_ref().clone(), exec)),
                    // Answered by an identical call that ran at the same time.
                    Ok(answer) => Ok((
                        self.hit(id, &answer, hit_deltas, started).into_answer(),
                        Execution {
                            ran: false,
                            ..Default::default()
                        },
                    )),
                    Err(error) if exec.ran => Err((error.as_ref().clone(), exec)),
                    Err(error) => Err((
                        RouterError {
                            id,
                            message: format!(
                                "an identical call running at the same time failed: {}",
                                error.message
                            ),
                            attempts: Vec::new(),
                            ..error.as_ref().clone()
                        },
                        Execution::default(),
                    )),
                }
            }
            _ => {
                let mut exec = Execution {
                    ran: true,
                    ..Default::default()
                };
                match self.execute(id, route, &request, deltas, &mut exec).await {
                    Ok(answer) => Ok((answer, exec)),
                    Err(error) => Err((error, exec)),
                }
            }
        };
        match outcome {
            Ok((answer, exec)) => {
                let coalesced = !exec.ran;
                let cost = if coalesced { 0.0 } else { exec.cost };
                if !coalesced {
                    let tokens =
                        (answer.usage.prompt_tokens + answer.usage.completion_tokens) as u64;
                    if let (Some(rate), Some(key)) = (&self.key_tokens, key) {
                        rate.consume(key, tokens);
                    }
                    if let Some(rate) = &route.tokens {
                        rate.consume("", tokens);
                    }
                }
                if let (Some(budgets), Some(reservation)) = (&self.budgets, reservation) {
                    budgets.settle(reservation, cost);
                }
                Ok(RouterResponse {
                    id,
                    text: answer.text,
                    tool_calls: answer.tool_calls,
                    finish_reason: answer.finish_reason,
                    usage: answer.usage,
                    provider: answer.provider,
                    model: answer.model,
                    system: answer.system,
                    cache: if coalesced { CacheStatus::Hit } else { cache },
                    attempts: exec.attempts,
                    latency: started.elapsed(),
                    ttft: exec.ttft,
                    cost,
                })
            }
            Err((error, exec)) => {
                if let (Some(budgets), Some(reservation)) = (&self.budgets, reservation) {
                    budgets.settle(reservation, 0.0);
                }
                Err(RouterError {
                    attempts: if exec.ran {
                        exec.attempts
                    } else {
                        error.attempts
                    },
                    ..error
                })
            }
        }
    }

    /// A cached answer, streamed as one piece when the caller streams.
    fn hit(
        &self,
        id: Uuid,
        answer: &Answer,
        deltas: Option<UnboundedSender<String>>,
        started: Instant,
    ) -> RouterResponse {
        if let Some(deltas) = deltas {
            if !answer.text.is_empty() {
                let _ = deltas.send(answer.text.clone());
            }
        }
        let latency = started.elapsed();
        RouterResponse {
            id,
            text: answer.text.clone(),
            tool_calls: answer.tool_calls.clone(),
            finish_reason: answer.finish_reason,
            usage: answer.usage,
            provider: answer.provider.clone(),
            model: answer.model.clone(),
            system: answer.system.clone(),
            cache: CacheStatus::Hit,
            attempts: Vec::new(),
            latency,
            ttft: Some(latency),
            cost: 0.0,
        }
    }

    /// Tries the route's targets until one answers.
    async fn execute(
        &self,
        id: Uuid,
        route: &Route,
        request: &RouterRequest,
        deltas: Option<UnboundedSender<String>>,
        exec: &mut Execution,
    ) -> Result<Answer, RouterError> {
        let started = Instant::now();
        let order = route.order();
        let all_cooling = order.iter().all(|t| t.breaker.is_open());
        // Text the caller has already been sent (a later attempt continues it).
        let mut produced = String::new();
        let mut last_error: Option<ProviderError> = None;
        let cooldown = Duration::from_secs_f64(self.gateway.cooldown_secs);
        for target in order {
            let Some(provider) = &target.provider else {
                exec.attempts.push(AttemptRecord {
                    provider: target.provider_name.clone(),
                    model: target.model.clone(),
                    outcome: "unavailable".into(),
                    error_kind: Some("unavailable".into()),
                    status: None,
                    error: Some(format!(
                        "provider `{}` is not available",
                        target.provider_name
                    )),
                    retry_after_ms: None,
                    latency_ms: 0.0,
                    streamed_chars: 0,
                });
                continue;
            };
            let retry = &target.config.retry;
            for attempt in 1..=retry.attempts {
                // A target that is cooling down is skipped, unless every target is.
                if !all_cooling && !target.breaker.allow() {
                    exec.attempts.push(AttemptRecord {
                        provider: target.provider_name.clone(),
                        model: target.model.clone(),
                        outcome: "skipped".into(),
                        error_kind: Some("cooldown".into()),
                        status: None,
                        error: Some("cooling down after repeated failures".into()),
                        retry_after_ms: None,
                        latency_ms: 0.0,
                        streamed_chars: 0,
                    });
                    break;
                }
                let before = produced.len();
                let attempt_started = Instant::now();
                let result = self
                    .attempt(
                        target,
                        provider.as_ref(),
                        request,
                        &mut produced,
                        deltas.as_ref(),
                        exec,
                        started,
                    )
                    .await;
                let latency_ms = millis(attempt_started.elapsed());
                match result {
                    Ok(reply) => {
                        target.breaker.success();
                        exec.attempts.push(AttemptRecord {
                            provider: target.provider_name.clone(),
                            model: target.model.clone(),
                            outcome: "ok".into(),
                            error_kind: None,
                            status: None,
                            error: None,
                            retry_after_ms: None,
                            latency_ms,
                            streamed_chars: produced[before..].chars().count(),
                        });
                        exec.cost = (target.price.input * reply.usage.prompt_tokens as f64
                            + target.price.output * reply.usage.completion_tokens as f64)
                            / 1e6;
                        return Ok(Answer {
                            text: reply.text,
                            tool_calls: reply.tool_calls,
                            finish_reason: reply.finish_reason,
                            usage: reply.usage,
                            provider: target.provider_name.clone(),
                            model: target.model.clone(),
                            system: provider.system().to_string(),
                        });
                    }
                    Err(error) => {
                        // Only failures that say something about the target's health count
                        // towards its cooldown: a request it refuses as invalid (a caller's
                        // mistake) must not take it out for everyone.
                        if error.counts_against_target() {
                            target
                                .breaker
                                .failure(self.gateway.cooldown_failures, cooldown);
                        }
                        tracing::info!(
                            request = %id,
                            provider = %target.provider_name,
                            model = %target.model,
                            attempt,
                            error = %error.message,
                            "a model attempt failed"
                        );
                        exec.attempts.push(AttemptRecord {
                            provider: target.provider_name.clone(),
                            model: target.model.clone(),
                            outcome: "error".into(),
                            error_kind: Some(error.kind.as_str().into()),
                            status: error.status,
                            error: Some(error.message.clone()),
                            retry_after_ms: error.retry_after.map(millis),
                            latency_ms,
                            streamed_chars: produced[before..].chars().count(),
                        });
                        let retryable = match error.kind {
                            FailureKind::Status => {
                                retry.on_status.contains(&error.status.unwrap_or(0))
                            }
                            FailureKind::Invalid | FailureKind::Unavailable => false,
                            ref kind => retry.on_errors.iter().any(|e| e == kind.as_str()),
                        };
                        let wait = match error.retry_after {
                            Some(after) if after.as_secs_f64() > retry.max_retry_after_secs => None,
                            Some(after) => Some(after),
                            None => Some(backoff(&target.config, attempt)),
                        };
                        last_error = Some(error);
                        match wait {
                            Some(wait) if retryable && attempt < retry.attempts => {
                                tokio::time::sleep(wait).await
                            }
                            _ => break,
                        }
                    }
                }
            }
        }
        let message = match &last_error {
            Some(error) => format!(
                "route `{}` failed after {} attempt(s); the last: {}",
                request.route,
                exec.attempts
                    .iter()
                    .filter(|a| a.outcome == "error")
                    .count(),
                error.message
            ),
            None => format!(
                "route `{}` has no target available ({})",
                request.route,
                exec.attempts
                    .iter()
                    .filter_map(|a| a.error.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        };
        Err(RouterError {
            id,
            code: match &last_error {
                Some(e) if e.kind == FailureKind::Invalid => "upstream_rejected",
                Some(e)
                    if e.kind == FailureKind::Status
                        && matches!(e.status, Some(400 | 404 | 413 | 422)) =>
                {
                    "upstream_rejected"
                }
                Some(_) => "upstream_failed",
                None => "unavailable",
            },
            message,
            retry_after: None,
            attempts: exec.attempts.clone(),
        })
    }

    /// One attempt at one target, under its deadlines. Streamed text goes to the caller as it
    /// arrives (without what repeats `produced`), and is appended to `produced`.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        target: &Target,
        provider: &dyn Provider,
        request: &RouterRequest,
        produced: &mut String,
        deltas: Option<&UnboundedSender<String>>,
        exec: &mut Execution,
        call_started: Instant,
    ) -> Result<ProviderReply, ProviderError> {
        let config = &target.config;
        let timeout = Duration::from_secs_f64(config.timeout_secs);
        let max_tokens = request.params.max_tokens.or(config.max_tokens);
        let earlier = produced.clone();
        let (chunks, mut receiver) = match deltas {
            Some(_) => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let call = provider.chat(ProviderCall {
            model: &target.model,
            request,
            max_tokens,
            continue_from: &earlier,
            chunks,
        });
        tokio::pin!(call);
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let ttft = config
            .ttft_timeout_secs
            .filter(|_| deltas.is_some())
            .map(Duration::from_secs_f64);
        // A second timer only for streamed attempts with a TTFT deadline.
        let mut first_deadline = ttft.map(|t| Box::pin(tokio::time::sleep(t)));
        let mut first = false;
        let mut open = receiver.is_some();
        let mut repeat = Repeat::new(&earlier);
        let mut forward = |chunk: Chunk, first: &mut bool, produced: &mut String| {
            if !*first {
                *first = true;
                if exec.ttft.is_none() {
                    exec.ttft = Some(call_started.elapsed());
                }
            }
            if let Chunk::Text(text) = chunk {
                let new = repeat.push(&text);
                if !new.is_empty() {
                    produced.push_str(&new);
                    if let Some(deltas) = deltas {
                        let _ = deltas.send(new);
                    }
                }
            }
        };
        let result = loop {
            tokio::select! {
                biased;
                chunk = async {
                    match receiver.as_mut() {
                        Some(r) => r.recv().await,
                        None => std::future::pending().await,
                    }
                }, if open => match chunk {
                    Some(chunk) => forward(chunk, &mut first, produced),
                    None => open = false,
                },
                result = &mut call => break result,
                _ = &mut deadline => {
                    break Err(ProviderError::new(
                        FailureKind::Timeout,
                        format!("{} did not finish within {timeout:?}", target.provider_name),
                    ))
                }
                _ = async {
                    match first_deadline.as_mut() {
                        Some(sleep) => sleep.await,
                        None => std::future::pending().await,
                    }
                }, if first_deadline.is_some() && !first => {
                    break Err(ProviderError::new(
                        FailureKind::TtftTimeout,
                        format!(
                            "{} sent no token within {:?}",
                            target.provider_name,
                            ttft.unwrap_or_default()
                        ),
                    ))
                }
            }
        };
        // What the provider sent before it returned.
        if let Some(receiver) = receiver.as_mut() {
            while let Ok(chunk) = receiver.try_recv() {
                forward(chunk, &mut first, produced);
            }
        }
        let tail = repeat.finish();
        if !tail.is_empty() {
            produced.push_str(&tail);
            if let Some(deltas) = deltas {
                let _ = deltas.send(tail);
            }
        }
        let mut reply = result?;
        // The whole answer: the earlier text, then this attempt's without a restart's repetition.
        if !earlier.is_empty() {
            let continued = reply
                .text
                .strip_prefix(earlier.as_str())
                .unwrap_or(&reply.text);
            reply.text = format!("{earlier}{continued}");
        }
        Ok(reply)
    }
}

impl RouterResponse {
    fn into_answer(self) -> Answer {
        Answer {
            text: self.text,
            tool_calls: self.tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
            provider: self.provider,
            model: self.model,
            system: self.system,
        }
    }
}

/// Removes a restarted answer's repetition of the text already sent: while the new text could
/// still be that text again, it is held back; once it has repeated all of it, the repetition is
/// dropped; once it differs, what was held back is released.
struct Repeat {
    earlier: String,
    held: String,
    settled: bool,
}

impl Repeat {
    fn new(earlier: &str) -> Self {
        Repeat {
            earlier: earlier.to_string(),
            held: String::new(),
            settled: earlier.is_empty(),
        }
    }

    /// The part of `text` to pass on now.
    fn push(&mut self, text: &str) -> String {
        if self.settled {
            return text.to_string();
        }
        self.held.push_str(text);
        if self.held.len() < self.earlier.len() && self.earlier.starts_with(&self.held) {
            return String::new();
        }
        self.settled = true;
        let held = std::mem::take(&mut self.held);
        match held.strip_prefix(self.earlier.as_str()) {
            Some(rest) => rest.to_string(),
            None => held,
        }
    }

    /// The end of the stream: whatever is still held is new text.
    fn finish(&mut self) -> String {
        self.settled = true;
        std::mem::take(&mut self.held)
    }
}

/// The wait before retry `attempt + 1`.
fn backoff(target: &TargetConfig, attempt: u32) -> Duration {
    let retry = &target.retry;
    let base = retry.base_ms as f64;
    let ms = match retry.backoff {
        config::BackoffKind::Constant => base,
        config::BackoffKind::Linear => base * attempt as f64,
        config::BackoffKind::Exponential => base * 2f64.powi(attempt.saturating_sub(1) as i32),
    }
    .min(retry.max_ms as f64);
    let ms = if retry.jitter {
        rand::rng().random_range(0.0..=ms)
    } else {
        ms
    };
    Duration::from_secs_f64(ms / 1000.0)
}

/// `value` with every object's keys in sorted order (serde_json may keep insertion order).
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The exact-match cache key: a digest of the route and the normalized request (JSON with
/// sorted keys).
fn cache_key(request: &RouterRequest) -> [u8; 32] {
    let normalized = json!({
        "route": request.route,
        "messages": request.messages,
        "tools": request.tools,
        "tool_choice": wire::tool_choice_json(&request.tool_choice),
        "params": request.params,
        "extra": request.extra,
    });
    Sha256::digest(canonical(&normalized).to_string().as_bytes()).into()
}

/// An upper bound of the request's prompt tokens: every token is at least one byte, plus a
/// margin per message for the chat template.
fn prompt_bound(request: &RouterRequest) -> u64 {
    let messages: usize = request
        .messages
        .iter()
        .map(|m| {
            m.content.len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len() + 16)
                    .sum::<usize>()
                + 16
        })
        .sum();
    let tools: usize = request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len() + 32)
        .sum();
    (messages + tools + 64) as u64
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Checks `x-stead-metadata`: a JSON object of up to 16 string, number or bool entries.
pub fn parse_metadata(text: &str) -> Result<Map<String, Value>, String> {
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
            ))
            }
        }
    }
    Ok(map)
}

/// Flags shared between a caller and a call it may abandon.
pub type CancelFlag = Arc<AtomicBool>;

/// Resolves once `flag` is set, looking every 20 ms.
pub async fn cancelled(flag: &AtomicBool) {
    while !flag.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_that_repeats_the_earlier_text_is_trimmed() {
        let mut r = Repeat::new("Hello, wor");
        assert_eq!(r.push("Hel"), "");
        assert_eq!(r.push("lo, wo"), "");
        assert_eq!(r.push("rld!"), "ld!");
        assert_eq!(r.push(" Bye"), " Bye");
        assert_eq!(r.finish(), "");
    }

    #[test]
    fn a_continuation_passes_through() {
        let mut r = Repeat::new("Hello, wor");
        assert_eq!(r.push("ld"), "ld");
        assert_eq!(r.push("!"), "!");
        // A continuation that starts like the earlier text is held only while it could be a
        // repeat, and released whole.
        let mut r = Repeat::new("abc");
        assert_eq!(r.push("ab"), "");
        assert_eq!(r.push("x"), "abx");
        let mut r = Repeat::new("abcdef");
        assert_eq!(r.push("ab"), "");
        assert_eq!(r.finish(), "ab");
    }

    #[test]
    fn backoff_grows_as_configured_and_stays_under_the_cap() {
        let mut target: TargetConfig = serde_json::from_value(json!({
            "provider": "p", "model": "m",
            "retry": { "backoff": "exponential", "base_ms": 100, "max_ms": 350, "jitter": false }
        }))
        .unwrap();
        let ms = |t: &TargetConfig, n| backoff(t, n).as_millis();
        assert_eq!(
            [ms(&target, 1), ms(&target, 2), ms(&target, 3)],
            [100, 200, 350]
        );
        target.retry.backoff = config::BackoffKind::Linear;
        assert_eq!(
            [ms(&target, 1), ms(&target, 2), ms(&target, 3)],
            [100, 200, 300]
        );
        target.retry.backoff = config::BackoffKind::Constant;
        assert_eq!([ms(&target, 1), ms(&target, 3)], [100, 100]);
        target.retry.jitter = true;
        assert!((0..50).all(|_| ms(&target, 1) <= 100));
    }

    #[test]
    fn cache_keys_ignore_key_order_and_differ_by_content() {
        let a = RouterRequest {
            route: "r".into(),
            messages: vec![crate::ChatMessage::user("hi")],
            extra: serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap(),
            ..Default::default()
        };
        let mut b = a.clone();
        b.extra = serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap();
        assert_eq!(cache_key(&a), cache_key(&b));
        b.messages = vec![crate::ChatMessage::user("hi!")];
        assert_ne!(cache_key(&a), cache_key(&b));
        let mut c = a.clone();
        c.route = "other".into();
        assert_ne!(cache_key(&a), cache_key(&c));
    }

    #[test]
    fn metadata_is_a_small_flat_object() {
        assert!(parse_metadata(r#"{"team":"ops","n":3,"ok":true}"#).is_ok());
        assert!(parse_metadata("[1]").is_err());
        assert!(parse_metadata(r#"{"nested":{"a":1}}"#).is_err());
        let many: Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!(i))).collect();
        assert!(parse_metadata(&Value::Object(many).to_string()).is_err());
    }

    #[test]
    fn only_health_failures_count_towards_a_cooldown() {
        let status = |code| ProviderError::status(code, None, "x").counts_against_target();
        assert!(status(500) && status(503) && status(429) && status(408));
        assert!(!status(400) && !status(404) && !status(422));
        assert!(!ProviderError::new(FailureKind::Invalid, "x").counts_against_target());
        assert!(ProviderError::new(FailureKind::TtftTimeout, "x").counts_against_target());
        assert!(ProviderError::new(FailureKind::Connect, "x").counts_against_target());
    }

    #[test]
    fn breakers_open_after_the_threshold_and_let_one_trial_through() {
        let breaker = Breaker::default();
        let cooldown = Duration::from_millis(30);
        breaker.failure(2, cooldown);
        assert!(breaker.allow());
        breaker.failure(2, cooldown);
        assert!(!breaker.allow());
        std::thread::sleep(Duration::from_millis(40));
        assert!(breaker.allow(), "one trial after the cooldown");
        assert!(!breaker.allow(), "only one");
        breaker.failure(2, cooldown);
        assert!(!breaker.allow(), "a failed trial opens it again");
        std::thread::sleep(Duration::from_millis(40));
        assert!(breaker.allow());
        breaker.success();
        assert!(breaker.allow() && breaker.allow());
    }
}

//! One call through the router: limits and budgets, the cache (identical concurrent calls
//! coalesced), running the route, and the request-log record it leaves (what a call settles
//! however it ends is in `settle`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;
use tracing::Instrument;
use uuid::Uuid;

use crate::cache::{cache_key, Answer};
use crate::log::{AttemptRecord, LogStatus, RequestLogEntry};
use crate::metrics::Observation;
use crate::provider::RouterRequest;
use crate::route::Route;
use crate::settle::{millis, prompt_bound, Abandonment, Ledger};
use crate::spend::CallReservation;
use crate::{
    completions, CacheMode, CacheStatus, CallOptions, Router, RouterError, RouterErrorCode,
    RouterResponse, BUDGET_MAX_TOKENS,
};

/// What the call that ran the targets learned, beyond the answer.
#[derive(Debug, Default)]
pub(crate) struct Execution {
    pub(crate) attempts: Vec<AttemptRecord>,
    pub(crate) ttft: Option<Duration>,
    pub(crate) cost: f64,
    /// Whether this call ran the targets (not answered by an identical call's run).
    pub(crate) ran: bool,
}

impl Router {
    /// Runs one chat completion. With `deltas`, the answer's text is streamed into it as it
    /// arrives (one continuous text even across failover). Dropping the future abandons the
    /// call: its attempt is stopped, and what it may have cost is settled at once (see
    /// [`Abandonment`]) with a log record of status `abandoned`.
    pub async fn call(
        &self,
        mut request: RouterRequest,
        options: CallOptions,
        deltas: Option<UnboundedSender<String>>,
    ) -> Result<RouterResponse, RouterError> {
        let id = options.request_id.unwrap_or_else(Uuid::now_v7);
        let started = Instant::now();
        let at = chrono::Utc::now();
        let stream = deltas.is_some();
        // The route's guardrails first: what they redact, nothing after them sees.
        let mut acted = Vec::new();
        let guard = match self
            .guard_request(id, &mut request, &options, &mut acted)
            .await
        {
            Ok(guard) => guard,
            Err(error) => {
                let latency = started.elapsed();
                let base = self.base_record(id, at, &options, &request.route, latency, stream);
                if let Some(log) = &self.log {
                    // Without the request's bodies: they hold what the guardrail refused.
                    log.record(RequestLogEntry {
                        guardrails: acted,
                        ..self.failed_record(base, &error, latency)
                    });
                }
                return Err(error);
            }
        };
        let mut holdback = guard.as_ref().map(crate::guard::Guard::holdback);
        let span = chat_span(id, &request, &options);
        let ledger = Ledger::default();
        let mut abandonment = Abandonment {
            router: self,
            id,
            at,
            started,
            options: &options,
            request: &request,
            ledger: &ledger,
            stream,
            streamed_bytes: 0,
            armed: true,
        };
        let run = self
            .run(
                id,
                request.clone(),
                &options,
                deltas.is_some(),
                &ledger,
                started,
            )
            .instrument(span.clone());
        // A streamed answer a `judge` guardrail holds whole is sent once it passes.
        let late = deltas.clone();
        let result = match deltas {
            // The text passes through here, so that an abandoned call knows what it streamed
            // (and, with guardrails, is held back until it may be released).
            Some(outer) => {
                let streamed = &mut abandonment.streamed_bytes;
                relay(run, &ledger, outer, streamed, holdback.as_mut()).await
            }
            None => run.await,
        };
        let result = match (result, holdback, &guard) {
            (Ok(response), Some(holdback), Some(guard)) => self
                .guard_answer(
                    id,
                    response,
                    guard,
                    holdback,
                    &options,
                    late.as_ref(),
                    &mut acted,
                )
                .await
                .map(|response| RouterResponse {
                    guardrails: acted.clone(),
                    ..response
                }),
            (result, _, _) => result,
        };
        abandonment.armed = false;
        let latency = started.elapsed();
        let base = RequestLogEntry {
            guardrails: acted,
            ..self.base_record(id, at, &options, &request.route, latency, stream)
        };
        let record = match &result {
            Ok(response) => self.answered_record(&span, base, &request, response, latency),
            Err(error) => {
                span.record("error.type", error.code.as_str());
                RequestLogEntry {
                    bodies: self.logged_bodies(&request, None),
                    ..self.failed_record(base, error, latency)
                }
            }
        };
        if let Some(log) = &self.log {
            log.record(record);
        }
        result
    }

    pub(crate) async fn run(
        &self,
        id: Uuid,
        mut request: RouterRequest,
        options: &CallOptions,
        streamed: bool,
        ledger: &Ledger,
        started: Instant,
    ) -> Result<RouterResponse, RouterError> {
        let deltas = if streamed { ledger.deltas() } else { None };
        // The route, then requests per minute: the key's, then the route's.
        let key = options.api_key.as_deref();
        self.check_images(id, &request)?;
        let route = self.admit(id, &request.route, key)?;
        // The key's own rates (a virtual key's `rpm`, `tpm`), beside the installation's.
        self.check_key_limits(id, key).await?;
        let grant = options.budget_grant_usd.unwrap_or(0.0).max(0.0);
        // The cache: a hit costs nothing and is not limited by tokens or budgets.
        let cache = match (&self.cache, route.cache, options.cache) {
            (Some(_), true, CacheMode::Bypass) => CacheStatus::Bypass,
            (Some(cache), true, CacheMode::Use) => {
                if let Some(answer) = cache.get(&cache_key(&request, key)).await {
                    return Ok(self.hit(id, &answer, deltas, started));
                }
                CacheStatus::Miss
            }
            _ => CacheStatus::Off,
        };
        // Tokens per minute: a call starts while the balance is positive.
        self.check_tokens(id, &request.route, route, key)?;
        // The budget: reserve the most this call can cost.
        let reservation = self.reserve(id, route, &mut request, key, grant).await?;
        // From here on the upstream may bill: an abandoned call is charged.
        ledger.admit(reservation);
        let outcome = self
            .execute_once(id, route, &request, key, cache, deltas, started)
            .await;
        match outcome {
            Ok((answer, exec)) => {
                let coalesced = !exec.ran;
                let cost = if coalesced { 0.0 } else { exec.cost };
                if !coalesced {
                    let tokens =
                        (answer.usage.prompt_tokens + answer.usage.completion_tokens) as u64;
                    self.consume_key_tokens(key, tokens);
                    if let Some(rate) = &route.tokens {
                        rate.consume("", tokens);
                    }
                }
                if let Some(reservation) = ledger.settle() {
                    self.settle_budgets(reservation, cost);
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
                    guardrails: Vec::new(),
                })
            }
            Err((error, exec)) => {
                if let Some(reservation) = ledger.settle() {
                    self.settle_budgets(reservation, 0.0);
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
}

impl Router {
    /// Reserves the most the call can cost against the key's budgets (a call without
    /// `max_tokens` on a route whose targets set none is bounded to `BUDGET_MAX_TOKENS`).
    async fn reserve(
        &self,
        id: Uuid,
        route: &Route,
        request: &mut RouterRequest,
        key: Option<&str>,
        grant: f64,
    ) -> Result<Option<CallReservation>, RouterError> {
        let Some(key) = key else {
            return Ok(None);
        };
        let limits = self.directory_budgets(id, key).await?;
        if !self.budgeted(&limits) {
            return Ok(None);
        }
        if request.params.max_tokens.is_none()
            && route.targets.iter().any(|t| t.config.max_tokens.is_none())
        {
            request.params.max_tokens = Some(BUDGET_MAX_TOKENS);
        }
        let most = route.most_expensive();
        let prompt = prompt_bound(request) as f64;
        let completion = request
            .params
            .max_tokens
            .into_iter()
            .chain(route.targets.iter().filter_map(|t| t.config.max_tokens))
            .max()
            .unwrap_or(BUDGET_MAX_TOKENS) as f64;
        let amount = (most.input * prompt + most.output * completion) / 1e6;
        self.reserve_budgets(id, key, amount, limits, grant)
            .await
            .map(Some)
    }

    /// Runs the route's targets once for this call: on a cache miss, identical calls at the
    /// same time share one run (the others are answered as hits); else the call runs alone.
    #[allow(clippy::too_many_arguments)]
    async fn execute_once(
        &self,
        id: Uuid,
        route: &Route,
        request: &RouterRequest,
        key: Option<&str>,
        cache: CacheStatus,
        deltas: Option<UnboundedSender<String>>,
        started: Instant,
    ) -> Result<(Answer, Execution), (RouterError, Execution)> {
        let (Some(store), CacheStatus::Miss) = (&self.cache, cache) else {
            let mut exec = Execution {
                ran: true,
                ..Default::default()
            };
            return match self.execute(id, route, request, deltas, &mut exec).await {
                Ok(answer) => Ok((answer, exec)),
                Err(error) => Err((error, exec)),
            };
        };
        let execution = Arc::new(Mutex::new(Execution::default()));
        let ran = execution.clone();
        let hit_deltas = deltas.clone();
        let answer = store
            .try_get_with(cache_key(request, key), async {
                let mut exec = Execution {
                    ran: true,
                    ..Default::default()
                };
                let result = self.execute(id, route, request, deltas, &mut exec).await;
                *ran.lock().unwrap_or_else(PoisonError::into_inner) = exec;
                result.map(Arc::new)
            })
            .await;
        let exec = std::mem::take(&mut *execution.lock().unwrap_or_else(PoisonError::into_inner));
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
                    unquoted: error
                        .unquoted
                        .as_ref()
                        .map(|m| format!("an identical call running at the same time failed: {m}")),
                    attempts: Vec::new(),
                    ..error.as_ref().clone()
                },
                Execution::default(),
            )),
        }
    }
}

/// The trace span of one chat call (OpenTelemetry's GenAI names); the outcome fills in the rest.
fn chat_span(id: Uuid, request: &RouterRequest, options: &CallOptions) -> tracing::Span {
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
    span
}

/// Passes a streamed call's text from `ledger`'s channel on to `outer` while `run` runs,
/// counting the bytes, so that an abandoned call knows what it streamed.
async fn relay<T>(
    run: impl std::future::Future<Output = T>,
    ledger: &Ledger,
    outer: UnboundedSender<String>,
    streamed_bytes: &mut usize,
    mut holdback: Option<&mut stead_guardrails::Holdback>,
) -> T {
    let (inner, mut texts) = tokio::sync::mpsc::unbounded_channel();
    ledger.set_deltas(inner);
    let mut send = |text: Option<String>| {
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            *streamed_bytes += text.len();
            let _ = outer.send(text);
        }
    };
    tokio::pin!(run);
    let result = loop {
        tokio::select! {
            biased;
            Some(text) = texts.recv() => match holdback.as_deref_mut() {
                Some(holdback) => send(holdback.push(&text)),
                None => send(Some(text)),
            },
            result = &mut run => break result,
        }
    };
    while let Ok(text) = texts.try_recv() {
        match holdback.as_deref_mut() {
            Some(holdback) => send(holdback.push(&text)),
            None => send(Some(text)),
        }
    }
    // A holdback that holds the text whole releases it once its model check passes it.
    if let Some(holdback) = holdback.filter(|h| !h.holds_whole()) {
        send(holdback.finish());
    }
    result
}

impl Router {
    /// The record of an answered chat call (a cache hit counts no tokens), its span's answer
    /// attributes, and — unless the cache answered — its metrics.
    fn answered_record(
        &self,
        span: &tracing::Span,
        base: RequestLogEntry,
        request: &RouterRequest,
        response: &RouterResponse,
        latency: Duration,
    ) -> RequestLogEntry {
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
            format!(
                "[\"{}\"]",
                completions::finish_reason_str(response.finish_reason)
            ),
        );
        let hit = response.cache == CacheStatus::Hit;
        if !hit {
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
        let counted = |tokens: usize| if hit { 0 } else { tokens as u64 };
        RequestLogEntry {
            provider: Some(response.provider.clone()),
            model: Some(response.model.clone()),
            status: LogStatus::Ok,
            attempts: response.attempts.clone(),
            ttft_ms: response.ttft.map(millis),
            tokens_in: counted(response.usage.prompt_tokens),
            tokens_out: counted(response.usage.completion_tokens),
            cost: response.cost,
            cache_hit: hit,
            bodies: self.logged_bodies(
                request,
                Some(serde_json::json!({
                    "text": response.text,
                    "tool_calls": response.tool_calls,
                })),
            ),
            ..base
        }
    }
}

/// The checks every call through a route passes before it runs (chat and embeddings).
impl Router {
    /// The call's route, once the key's and the route's requests per minute admit it.
    /// A request showing images to a route none of whose models sees them is refused before
    /// any limit counts it.
    fn check_images(&self, id: Uuid, request: &RouterRequest) -> Result<(), RouterError> {
        let Some(route) = self.routes.get(&request.route) else {
            return Ok(());
        };
        if !request.has_images() || route.targets.iter().any(|t| t.images) {
            return Ok(());
        }
        let models: Vec<String> = route
            .targets
            .iter()
            .map(|t| format!("{}/{}", t.provider_name, t.model))
            .collect();
        Err(RouterError {
            id,
            code: RouterErrorCode::ImagesUnsupported,
            message: format!(
                "route `{}` has no model that sees images ({}); send text only, or use a route \
                 whose models see images (`images = true`, docs/multimodal.md)",
                request.route,
                models.join(", ")
            ),
            unquoted: None,
            retry_after: None,
            attempts: Vec::new(),
            budget: None,
        })
    }

    pub(crate) fn admit(
        &self,
        id: Uuid,
        name: &str,
        key: Option<&str>,
    ) -> Result<&crate::route::Route, RouterError> {
        let Some(route) = self.routes.get(name) else {
            return Err(RouterError {
                id,
                code: RouterErrorCode::UnknownRoute,
                message: format!(
                    "no route is named `{name}` (the routes: {})",
                    self.route_names().join(", ")
                ),
                unquoted: None,
                retry_after: None,
                attempts: Vec::new(),
                budget: None,
            });
        };
        if let (Some(rate), Some(key)) = (&self.key_requests, key) {
            rate.check(key).map_err(rate_limited(
                id,
                format!("API key `{key}`"),
                "requests per minute",
            ))?;
        }
        if let Some(rate) = &route.requests {
            rate.check("").map_err(rate_limited(
                id,
                format!("route `{name}`"),
                "requests per minute",
            ))?;
        }
        Ok(route)
    }

    /// The key's and the route's tokens per minute: a call starts while the balance is
    /// positive.
    pub(crate) fn check_tokens(
        &self,
        id: Uuid,
        name: &str,
        route: &crate::route::Route,
        key: Option<&str>,
    ) -> Result<(), RouterError> {
        if let (Some(rate), Some(key)) = (&self.key_tokens, key) {
            rate.check(key).map_err(rate_limited(
                id,
                format!("API key `{key}`"),
                "tokens per minute",
            ))?;
        }
        if let Some(rate) = &route.tokens {
            rate.check("").map_err(rate_limited(
                id,
                format!("route `{name}`"),
                "tokens per minute",
            ))?;
        }
        Ok(())
    }
}

/// A `rate_limited` refusal of `who` over `limit`, once the wait is known.
fn rate_limited(
    id: Uuid,
    who: String,
    limit: &'static str,
) -> impl FnOnce(Duration) -> RouterError {
    move |wait| RouterError {
        id,
        code: RouterErrorCode::RateLimited,
        message: format!("{who} is over its {limit}"),
        unquoted: None,
        retry_after: Some(wait),
        attempts: Vec::new(),
        budget: None,
    }
}

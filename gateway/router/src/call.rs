//! One call through the router: limits and budgets, the cache (identical concurrent calls
//! coalesced), running the route, and the request-log record it leaves (what a call settles
//! however it ends is in `settle`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;
use tracing::Instrument;
use uuid::Uuid;

use serde_json::Value;

use crate::cache::cache_key;
use crate::log::{AttemptRecord, LogRecord};
use crate::metrics::Observation;
use crate::provider::RouterRequest;
use crate::settle::{millis, prompt_bound, Abandonment, Ledger};
use crate::{
    wire, CacheMode, CacheStatus, CallOptions, Router, RouterError, RouterErrorCode,
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
        let result = match deltas {
            // The text passes through here, so that an abandoned call knows what it streamed.
            Some(outer) => {
                let (inner, mut texts) = tokio::sync::mpsc::unbounded_channel();
                ledger.set_deltas(inner);
                tokio::pin!(run);
                let result = loop {
                    tokio::select! {
                        biased;
                        Some(text) = texts.recv() => {
                            abandonment.streamed_bytes += text.len();
                            let _ = outer.send(text);
                        }
                        result = &mut run => break result,
                    }
                };
                while let Ok(text) = texts.try_recv() {
                    abandonment.streamed_bytes += text.len();
                    let _ = outer.send(text);
                }
                result
            }
            None => run.await,
        };
        abandonment.armed = false;
        let latency = started.elapsed();
        // What every record of this call says; the outcome fills in the rest.
        let base = LogRecord {
            id,
            at,
            session_id: options.session_id,
            api_key: options.api_key.clone(),
            route: request.route.clone(),
            provider: None,
            model: None,
            status: String::new(),
            attempts: Vec::new(),
            latency_ms: millis(latency),
            ttft_ms: None,
            tokens_in: 0,
            tokens_out: 0,
            cost: 0.0,
            cache_hit: false,
            stream,
            metadata: self.logged_metadata(&options.metadata),
            error: None,
            bodies: Value::Null,
        };
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
                        provider: Some(response.provider.clone()),
                        model: Some(response.model.clone()),
                        status: "ok".into(),
                        attempts: response.attempts.clone(),
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
                        bodies: self.logged_bodies(
                            &request,
                            Some(serde_json::json!({
                                "text": response.text,
                                "tool_calls": response.tool_calls,
                            })),
                        ),
                        ..base
                    },
                    !hit,
                )
            }
            Err(error) => {
                span.record("error.type", error.code.as_str());
                let last = error.attempts.last();
                (
                    LogRecord {
                        provider: last.map(|a| a.provider.clone()),
                        model: last.map(|a| a.model.clone()),
                        status: match error.code {
                            code if code.is_limit() => code.to_string(),
                            _ => "error".to_string(),
                        },
                        attempts: error.attempts.clone(),
                        error: Some(error.message.clone()),
                        bodies: self.logged_bodies(&request, None),
                        ..base
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
            if let Some(last) = error.attempts.last() {
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
        let refuse =
            |code: RouterErrorCode, message: String, retry_after: Option<Duration>| RouterError {
                id,
                code,
                message,
                unquoted: None,
                retry_after,
                attempts: Vec::new(),
            };
        // The route, then requests per minute: the key's, then the route's.
        let key = options.api_key.as_deref();
        let route = self.admit(id, &request.route, key)?;
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
                Some(budgets.reserve(key, amount).await.map_err(|refused| {
                    refuse(refused.code, refused.message, Some(refused.retry_after))
                })?)
            }
            _ => None,
        };
        // From here on the upstream may bill: an abandoned call is charged.
        ledger.admit(reservation);
        let outcome = match (&self.cache, cache) {
            (Some(store), CacheStatus::Miss) => {
                let execution = Arc::new(Mutex::new(Execution::default()));
                let ran = execution.clone();
                let hit_deltas = deltas.clone();
                let answer = store
                    .try_get_with(cache_key(&request, key), async {
                        let mut exec = Execution {
                            ran: true,
                            ..Default::default()
                        };
                        let result = self.execute(id, route, &request, deltas, &mut exec).await;
                        *ran.lock().unwrap_or_else(PoisonError::into_inner) = exec;
                        result.map(Arc::new)
                    })
                    .await;
                let exec =
                    std::mem::take(&mut *execution.lock().unwrap_or_else(PoisonError::into_inner));
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
                            unquoted: error.unquoted.as_ref().map(|m| {
                                format!("an identical call running at the same time failed: {m}")
                            }),
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
                if let (Some(budgets), Some(reservation)) = (&self.budgets, ledger.settle()) {
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
                if let (Some(budgets), Some(reservation)) = (&self.budgets, ledger.settle()) {
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
}

/// The checks every call through a route passes before it runs (chat and embeddings).
impl Router {
    /// The call's route, once the key's and the route's requests per minute admit it.
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
    }
}

//! Embeddings through the router (`POST /v1/embeddings`, the knowledge collections): a route's
//! targets tried in order, each retried on the failures its rules name, breakers skipped;
//! per-key and per-route limits, strict budgets (input tokens at the target's input price), the
//! cache (the route and the exact inputs) and one request-log record per call, as for chat.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::log::{AttemptRecord, LogRecord};
use crate::metrics::Observation;
use crate::provider::{FailureKind, ProviderError};
use crate::route::{retry_wait, Route};
use crate::settle::millis;
use crate::{CacheMode, CacheStatus, CallOptions, Router, RouterError, RouterErrorCode};

/// Texts to embed through a route.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EmbedRequest {
    pub route: String,
    pub inputs: Vec<String>,
}

/// Embeddings as the cache keeps them.
#[derive(Debug, Clone)]
pub(crate) struct Embedded {
    vectors: Vec<Vec<f32>>,
    prompt_tokens: usize,
    provider: String,
    model: String,
    system: String,
}

/// A finished embedding call.
#[derive(Debug, Clone)]
pub struct EmbedResponse {
    pub id: Uuid,
    /// One vector per input, in order.
    pub vectors: Vec<Vec<f32>>,
    pub prompt_tokens: usize,
    /// The provider and model of the target that answered.
    pub provider: String,
    pub model: String,
    pub system: String,
    pub cache: CacheStatus,
    pub attempts: Vec<AttemptRecord>,
    pub latency: Duration,
    pub cost: f64,
}

/// A budget reservation until the call settles it; a call dropped before that (its caller
/// went away) is charged the most it could have cost, since the provider may have billed.
struct Held<'a> {
    router: &'a Router,
    reservation: Option<crate::limits::Reservation>,
}

impl Held<'_> {
    fn settle(&mut self, cost: f64) {
        if let (Some(budgets), Some(reservation)) = (&self.router.budgets, self.reservation.take())
        {
            budgets.settle(reservation, cost);
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let most = self.reservation.as_ref().map_or(0.0, |r| r.amount());
        self.settle(most);
    }
}

/// The cache entry of `request` for the key `scope` (its fingerprint): like answers, cached
/// embeddings are per key (docs/gateway.md, "Cache"), so a hit tells no key what another
/// embedded.
fn cache_key(request: &EmbedRequest, scope: Option<&str>) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update(b"embeddings\0");
    match scope {
        Some(scope) => {
            digest.update((scope.len() as u64).to_le_bytes());
            digest.update(scope.as_bytes());
        }
        None => digest.update(u64::MAX.to_le_bytes()),
    }
    digest.update(request.route.as_bytes());
    for input in &request.inputs {
        digest.update((input.len() as u64).to_le_bytes());
        digest.update(input.as_bytes());
    }
    digest.finalize().into()
}

impl Router {
    /// Embeds the request's inputs through its route, logged as one record.
    pub async fn embed(
        &self,
        request: EmbedRequest,
        options: CallOptions,
    ) -> Result<EmbedResponse, RouterError> {
        let id = options.request_id.unwrap_or_else(Uuid::now_v7);
        let started = Instant::now();
        let at = chrono::Utc::now();
        let span = tracing::info_span!(
            "embeddings",
            "otel.name" = format!("embeddings {}", request.route),
            "otel.kind" = "client",
            "gen_ai.operation.name" = "embeddings",
            "gen_ai.request.model" = %request.route,
            "gen_ai.response.id" = %id,
        );
        let result =
            tracing::Instrument::instrument(self.run_embed(id, &request, &options, started), span)
                .await;
        let latency = started.elapsed();
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
            stream: false,
            metadata: self.logged_metadata(&options.metadata),
            error: None,
            // The inputs may be whole documents: embeddings never keep bodies.
            bodies: Value::Null,
        };
        let record = match &result {
            Ok(response) => {
                let hit = response.cache == CacheStatus::Hit;
                if !hit {
                    self.metrics.observe(&Observation {
                        route: &request.route,
                        provider: &response.provider,
                        model: &response.model,
                        ok: true,
                        duration_s: latency.as_secs_f64(),
                        ttft_s: None,
                        input_tokens: response.prompt_tokens as u64,
                        output_tokens: 0,
                    });
                }
                LogRecord {
                    provider: Some(response.provider.clone()),
                    model: Some(response.model.clone()),
                    status: "ok".into(),
                    attempts: response.attempts.clone(),
                    tokens_in: if hit {
                        0
                    } else {
                        response.prompt_tokens as u64
                    },
                    cost: response.cost,
                    cache_hit: hit,
                    ..base
                }
            }
            Err(error) => {
                let last = error.attempts.last();
                if let Some(last) = last {
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
                LogRecord {
                    provider: last.map(|a| a.provider.clone()),
                    model: last.map(|a| a.model.clone()),
                    status: match error.code {
                        code if code.is_limit() => code.to_string(),
                        _ => "error".to_string(),
                    },
                    attempts: error.attempts.clone(),
                    error: Some(error.message.clone()),
                    ..base
                }
            }
        };
        if let Some(log) = &self.log {
            log.record(record);
        }
        result
    }

    async fn run_embed(
        &self,
        id: Uuid,
        request: &EmbedRequest,
        options: &CallOptions,
        started: Instant,
    ) -> Result<EmbedResponse, RouterError> {
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
        let cache = match (&self.embed_cache, route.cache, options.cache) {
            (Some(_), true, CacheMode::Bypass) => CacheStatus::Bypass,
            (Some(store), true, CacheMode::Use) => {
                if let Some(hit) = store
                    .get(&cache_key(request, options.api_key.as_deref()))
                    .await
                {
                    return Ok(EmbedResponse {
                        id,
                        vectors: hit.vectors.clone(),
                        prompt_tokens: hit.prompt_tokens,
                        provider: hit.provider.clone(),
                        model: hit.model.clone(),
                        system: hit.system.clone(),
                        cache: CacheStatus::Hit,
                        attempts: Vec::new(),
                        latency: started.elapsed(),
                        cost: 0.0,
                    });
                }
                CacheStatus::Miss
            }
            _ => CacheStatus::Off,
        };
        // Tokens per minute: a call starts while the balance is positive.
        self.check_tokens(id, &request.route, route, key)?;
        // The budget: a text has at most a token per byte, plus two markers.
        let mut held = Held {
            router: self,
            reservation: None,
        };
        if let (Some(budgets), Some(key)) = (&self.budgets, key) {
            let bound: usize = request.inputs.iter().map(|t| t.len() + 2).sum();
            let amount = route.most_expensive().input * bound as f64 / 1e6;
            held.reservation = Some(budgets.reserve(key, amount).await.map_err(|refused| {
                refuse(refused.code, refused.message, Some(refused.retry_after))
            })?);
        }
        let mut attempts = Vec::new();
        let outcome = self.embed_targets(id, route, request, &mut attempts).await;
        match outcome {
            Ok((embedded, cost)) => {
                let tokens = embedded.prompt_tokens as u64;
                if let (Some(rate), Some(key)) = (&self.key_tokens, key) {
                    rate.consume(key, tokens);
                }
                if let Some(rate) = &route.tokens {
                    rate.consume("", tokens);
                }
                held.settle(cost);
                if let (Some(store), CacheStatus::Miss) = (&self.embed_cache, cache) {
                    store
                        .insert(
                            cache_key(request, options.api_key.as_deref()),
                            Arc::new(embedded.clone()),
                        )
                        .await;
                }
                Ok(EmbedResponse {
                    id,
                    vectors: embedded.vectors,
                    prompt_tokens: embedded.prompt_tokens,
                    provider: embedded.provider,
                    model: embedded.model,
                    system: embedded.system,
                    cache,
                    attempts,
                    latency: started.elapsed(),
                    cost,
                })
            }
            Err(error) => {
                held.settle(0.0);
                Err(RouterError { attempts, ..error })
            }
        }
    }

    /// Tries the route's targets until one embeds the inputs; the answer and its cost.
    async fn embed_targets(
        &self,
        id: Uuid,
        route: &Route,
        request: &EmbedRequest,
        attempts: &mut Vec<AttemptRecord>,
    ) -> Result<(Embedded, f64), RouterError> {
        let order = route.order();
        let all_cooling = order.iter().all(|t| t.breaker.is_open());
        let cooldown = Duration::from_secs_f64(self.gateway.cooldown_secs);
        let mut last_error: Option<ProviderError> = None;
        let record = |target: &crate::route::Target,
                      outcome: &str,
                      error: Option<&ProviderError>,
                      latency_ms: f64| AttemptRecord {
            provider: target.provider_name.clone(),
            model: target.model.clone(),
            outcome: outcome.into(),
            error_kind: error.map(|e| e.kind.as_str().to_string()),
            status: error.and_then(|e| e.status),
            error: error.map(|e| e.message.clone()),
            retry_after_ms: error.and_then(|e| e.retry_after).map(millis),
            latency_ms,
            streamed_chars: 0,
        };
        for target in order {
            let Some(provider) = &target.provider else {
                let error = ProviderError::new(
                    FailureKind::Unavailable,
                    format!("provider `{}` is not available", target.provider_name),
                );
                attempts.push(record(target, "unavailable", Some(&error), 0.0));
                continue;
            };
            let retry = &target.config.retry;
            for attempt in 1..=retry.attempts {
                let admission = if all_cooling {
                    None
                } else {
                    target.breaker.admit()
                };
                if !all_cooling && admission.is_none() {
                    let mut skipped = record(target, "skipped", None, 0.0);
                    skipped.error_kind = Some("cooldown".into());
                    skipped.error = Some("cooling down after repeated failures".into());
                    attempts.push(skipped);
                    break;
                }
                let attempt_started = Instant::now();
                let deadline = Duration::from_secs_f64(target.config.timeout_secs);
                let result = match tokio::time::timeout(
                    deadline,
                    provider.embed(&target.model, &request.inputs),
                )
                .await
                {
                    Ok(result) => result,
                    Err(_) => Err(ProviderError::new(
                        FailureKind::Timeout,
                        format!(
                            "{} did not answer within {}s",
                            target.provider_name, target.config.timeout_secs
                        ),
                    )),
                }
                .and_then(|reply| {
                    if reply.vectors.len() == request.inputs.len() {
                        Ok(reply)
                    } else {
                        Err(ProviderError::new(
                            FailureKind::Stream,
                            format!(
                                "{} answered {} embeddings for {} inputs",
                                target.provider_name,
                                reply.vectors.len(),
                                request.inputs.len()
                            ),
                        ))
                    }
                });
                let latency_ms = millis(attempt_started.elapsed());
                drop(admission);
                match result {
                    Ok(reply) => {
                        target.breaker.success();
                        attempts.push(record(target, "ok", None, latency_ms));
                        let cost = target.price.input * reply.prompt_tokens as f64 / 1e6;
                        return Ok((
                            Embedded {
                                vectors: reply.vectors,
                                prompt_tokens: reply.prompt_tokens,
                                provider: target.provider_name.clone(),
                                model: target.model.clone(),
                                system: provider.system().to_string(),
                            },
                            cost,
                        ));
                    }
                    Err(error) => {
                        if error.counts_against_target() {
                            target
                                .breaker
                                .failure(self.gateway.cooldown_failures, cooldown);
                        }
                        tracing::info!(request = %id, provider = %target.provider_name,
                            model = %target.model, attempt, error = %error.message,
                            "an embedding attempt failed");
                        attempts.push(record(target, "error", Some(&error), latency_ms));
                        let wait = retry_wait(&target.config, &error, attempt);
                        last_error = Some(error);
                        match wait {
                            Some(wait) => tokio::time::sleep(wait).await,
                            None => break,
                        }
                    }
                }
            }
        }
        let (code, (message, unquoted)) = match &last_error {
            Some(error) => (
                match error.kind {
                    FailureKind::Invalid => RouterErrorCode::UpstreamRejected,
                    FailureKind::Status if matches!(error.status, Some(400 | 404 | 413 | 422)) => {
                        RouterErrorCode::UpstreamRejected
                    }
                    _ => RouterErrorCode::UpstreamFailed,
                },
                crate::failover::route_failed(&request.route, attempts, error),
            ),
            None => (
                RouterErrorCode::Unavailable,
                (
                    format!(
                        "route `{}` has no target available ({})",
                        request.route,
                        attempts
                            .iter()
                            .filter_map(|a| a.error.clone())
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                    None,
                ),
            ),
        };
        Err(RouterError {
            id,
            code,
            message,
            unquoted,
            retry_after: None,
            attempts: Vec::new(),
        })
    }
}

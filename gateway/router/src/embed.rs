//! Embeddings through the router (`POST /v1/embeddings`, the knowledge collections): a route's
//! targets tried in the failover loop chat uses (`crate::failover`);
//! per-key and per-route limits, strict budgets (input tokens at the target's input price), the
//! cache (the route and the exact inputs) and one request-log record per call, as for chat.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::failover::{Attempt, Tried};
use crate::log::{AttemptRecord, LogStatus, RequestLogEntry};
use crate::metrics::Observation;
use crate::provider::{FailureKind, Provider, ProviderError};
use crate::route::{Route, Target};
use crate::{CacheMode, CacheStatus, CallOptions, Router, RouterError};

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
    reservation: Option<crate::spend::CallReservation>,
}

impl Held<'_> {
    fn settle(&mut self, cost: f64) {
        if let Some(reservation) = self.reservation.take() {
            self.router.settle_budgets(reservation, cost);
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
        let mut acted = Vec::new();
        let run = self.run_embed(id, &request, &options, started, &mut acted);
        let result = tracing::Instrument::instrument(run, span).await;
        let latency = started.elapsed();
        // The inputs may be whole documents: embeddings never keep bodies.
        let base = RequestLogEntry {
            guardrails: acted,
            ..self.base_record(id, at, &options, &request.route, latency, false)
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
                RequestLogEntry {
                    provider: Some(response.provider.clone()),
                    model: Some(response.model.clone()),
                    status: LogStatus::Ok,
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
            Err(error) => self.failed_record(base, error, latency),
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
        acted: &mut Vec<stead_model::log::GuardrailEntry>,
    ) -> Result<EmbedResponse, RouterError> {
        // The route's guardrails first: the cache, the limits and the providers see the
        // inputs as they leave them.
        let guarded = self.guard_inputs(id, request, options, acted).await?;
        let request = guarded.as_ref().unwrap_or(request);
        // The route, then requests per minute: the key's, then the route's.
        let key = options.api_key.as_deref();
        let route = self.admit(id, &request.route, key)?;
        self.check_key_limits(id, key).await?;
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
        if let Some(key) = key {
            let limits = self.directory_budgets(id, key).await?;
            if self.budgeted(&limits) {
                let bound: usize = request.inputs.iter().map(|t| t.len() + 2).sum();
                let amount = route.most_expensive().input * bound as f64 / 1e6;
                held.reservation = Some(self.reserve_budgets(id, key, amount, limits, 0.0).await?);
            }
        }
        let mut attempts = Vec::new();
        let outcome = self.embed_targets(id, route, request, &mut attempts).await;
        match outcome {
            Ok((embedded, cost)) => {
                let tokens = embedded.prompt_tokens as u64;
                self.consume_key_tokens(key, tokens);
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
        let (target, embedded) = self
            .failover(
                id,
                &request.route,
                route,
                "an embedding attempt",
                attempts,
                &mut EmbedAttempt {
                    inputs: &request.inputs,
                },
            )
            .await?;
        let cost = target.price.input * embedded.prompt_tokens as f64 / 1e6;
        Ok((embedded, cost))
    }
}

/// An embedding call's tries.
struct EmbedAttempt<'r> {
    inputs: &'r [String],
}

impl Attempt for EmbedAttempt<'_> {
    type Answer = Embedded;

    async fn run(&mut self, target: &Target, provider: &dyn Provider) -> Tried<Embedded> {
        Tried {
            result: embed_once(target, provider, self.inputs).await,
            streamed_chars: 0,
        }
    }
}

/// One try at one target, under its deadline; an answer with another number of vectors than
/// inputs is a failed attempt.
async fn embed_once(
    target: &Target,
    provider: &dyn Provider,
    inputs: &[String],
) -> Result<Embedded, ProviderError> {
    let deadline = Duration::from_secs_f64(target.config.timeout_secs);
    let reply = match tokio::time::timeout(deadline, provider.embed(&target.model, inputs)).await {
        Ok(result) => result?,
        Err(_) => {
            return Err(ProviderError::new(
                FailureKind::Timeout,
                format!(
                    "{} did not answer within {}s",
                    target.provider_name, target.config.timeout_secs
                ),
            ))
        }
    };
    if reply.vectors.len() != inputs.len() {
        return Err(ProviderError::new(
            FailureKind::Stream,
            format!(
                "{} answered {} embeddings for {} inputs",
                target.provider_name,
                reply.vectors.len(),
                inputs.len()
            ),
        ));
    }
    Ok(Embedded {
        vectors: reply.vectors,
        prompt_tokens: reply.prompt_tokens,
        provider: target.provider_name.clone(),
        model: target.model.clone(),
        system: provider.system().to_string(),
    })
}

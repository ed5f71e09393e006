//! The `onnx` provider: the pooled local ONNX Runtime engine as one of the model router's
//! providers (`stead_model::Provider`); the binary registers one per started pool. The
//! `onnx_embedding` provider does the same for the local embedding pool.

use async_trait::async_trait;

use crate::pool::InferencePool;
use crate::{ChatRequest, Error, SamplingParams, StreamEvent};
use stead_model::{
    Chunk, FailureKind, Provider, ProviderCall, ProviderError, ProviderMetric, ProviderReply,
};

/// `max_tokens` of a local call when neither the caller nor the target sets one.
pub const DEFAULT_MAX_TOKENS: u32 = 512;

/// The local engine pool as a provider.
pub struct OnnxProvider {
    name: String,
    pool: std::sync::Arc<InferencePool>,
}

impl OnnxProvider {
    /// The engine's request for a router request.
    fn chat_request(
        &self,
        request: &stead_model::RouterRequest,
        sampling: SamplingParams,
        assistant_prefix: String,
    ) -> ChatRequest {
        ChatRequest {
            model: self.pool.model_name().to_string(),
            messages: request.messages.clone(),
            tools: request.tools.clone(),
            tool_choice: request.tool_choice.clone(),
            sampling,
            assistant_prefix,
        }
    }

    pub fn new(name: impl Into<String>, pool: std::sync::Arc<InferencePool>) -> Self {
        OnnxProvider {
            name: name.into(),
            pool,
        }
    }
}

/// How an engine error reads to the router: overload is a 503 (retried, with backoff), a
/// request the engine can never serve is not retried.
fn failure(error: Error) -> ProviderError {
    match error {
        Error::Overloaded { .. } => ProviderError::status(503, None, error.to_string()),
        Error::InvalidRequest(_)
        | Error::UnknownModel(_)
        | Error::InvalidToolSchema { .. }
        | Error::ContextOverflow { .. } => {
            ProviderError::new(FailureKind::Invalid, error.to_string())
        }
        Error::ShutDown
        | Error::ModelDir { .. }
        | Error::Runtime(_)
        | Error::ExecutionProvider(_) => {
            ProviderError::new(FailureKind::Unavailable, error.to_string())
        }
        Error::Inference(_) => ProviderError::new(FailureKind::Stream, error.to_string()),
    }
}

#[async_trait]
impl Provider for OnnxProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn system(&self) -> &str {
        "onnx"
    }

    /// The engine's models read text only.
    fn sees_images(&self, _model: &str) -> bool {
        false
    }

    fn metrics(&self) -> Vec<ProviderMetric> {
        let s = self.pool.prefix_stats();
        let model = self.pool.model_name().to_string();
        let figure = |name, help, counter, value: f64| ProviderMetric {
            name,
            help,
            counter,
            model: model.clone(),
            value,
        };
        vec![
            figure(
                "stead_inference_prefix_cache_hits_total",
                "Local prompts that continued a cached prefix",
                true,
                s.hits as f64,
            ),
            figure(
                "stead_inference_prefix_cache_misses_total",
                "Local prompts prefilled in full (no cached prefix long enough)",
                true,
                s.misses as f64,
            ),
            figure(
                "stead_inference_prefix_cache_hit_tokens_total",
                "Prompt tokens taken from the prefix cache instead of prefilled",
                true,
                s.hit_tokens as f64,
            ),
            figure(
                "stead_inference_prefix_cache_evictions_total",
                "Cached prompt pieces evicted to make room",
                true,
                s.evictions as f64,
            ),
            figure(
                "stead_inference_prefix_cache_evicted_tokens_total",
                "Tokens of the cached prompt pieces evicted",
                true,
                s.evicted_tokens as f64,
            ),
            figure(
                "stead_inference_prefix_cache_bytes",
                "Memory the prefix cache holds now",
                false,
                s.bytes as f64,
            ),
            figure(
                "stead_inference_prefix_cache_capacity_bytes",
                "The prefix cache's budget (0 = off)",
                false,
                s.capacity as f64,
            ),
        ]
    }

    fn measure(&self, _model: &str, request: &stead_model::RouterRequest) -> Option<(u64, u64)> {
        let sampling = SamplingParams {
            max_tokens: 1,
            ..SamplingParams::default()
        };
        let chat = self.chat_request(request, sampling, String::new());
        let window = self.pool.model_config().context_length as u64;
        match self.pool.prompt_tokens(chat) {
            Ok(tokens) => Some((tokens.len() as u64, window)),
            Err(Error::ContextOverflow { prompt_tokens, .. }) => {
                Some((prompt_tokens as u64, window))
            }
            Err(_) => None,
        }
    }

    async fn chat(&self, call: ProviderCall<'_>) -> Result<ProviderReply, ProviderError> {
        let request = call.request;
        if request.has_images() {
            // A route that says `images = true` over the local engine: refused, never ignored.
            return Err(ProviderError::new(
                FailureKind::Invalid,
                format!(
                    "provider `{}`: the local model does not see images",
                    self.name
                ),
            ));
        }
        let params = &request.params;
        let defaults = SamplingParams::default();
        let sampling = SamplingParams {
            temperature: params.temperature.unwrap_or(defaults.temperature),
            top_p: params.top_p.unwrap_or(defaults.top_p),
            seed: params.seed,
            max_tokens: call.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS) as usize,
            stop: params.stop.clone(),
            ..defaults
        };
        let chat = self.chat_request(request, sampling, call.continue_from.to_string());
        // Dropping the generation (when the router abandons the attempt) cancels the job.
        let mut generation = self.pool.generate(chat).await.map_err(failure)?;
        loop {
            match generation.next().await {
                Some(StreamEvent::Delta(text)) => {
                    if let Some(chunks) = &call.chunks {
                        let _ = chunks.send(Chunk::Text(text));
                    }
                }
                Some(StreamEvent::Done(completion)) => {
                    return Ok(ProviderReply {
                        text: completion.text,
                        tool_calls: completion.tool_calls,
                        finish_reason: completion.finish_reason,
                        usage: completion.usage,
                        model: completion.model,
                    })
                }
                Some(StreamEvent::Failed(error)) => return Err(failure(error)),
                None => {
                    return Err(ProviderError::new(
                        FailureKind::Unavailable,
                        "the inference pool stopped",
                    ))
                }
            }
        }
    }
}

/// The `onnx_embedding` provider: the local embedding pool (all-MiniLM-L6-v2 by default) as
/// one of the router's providers. It makes embeddings only; a chat call is refused as invalid.
pub struct OnnxEmbeddingProvider {
    name: String,
    /// The model as routes name it (its directory's name).
    model: String,
    pool: std::sync::Arc<crate::embedding_pool::EmbeddingPool>,
}

impl OnnxEmbeddingProvider {
    pub fn new(
        name: impl Into<String>,
        model: impl Into<String>,
        pool: std::sync::Arc<crate::embedding_pool::EmbeddingPool>,
    ) -> Self {
        OnnxEmbeddingProvider {
            name: name.into(),
            model: model.into(),
            pool,
        }
    }
}

#[async_trait]
impl Provider for OnnxEmbeddingProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn system(&self) -> &str {
        "onnx"
    }

    /// The engine's models read text only.
    fn sees_images(&self, _model: &str) -> bool {
        false
    }

    async fn chat(&self, _call: ProviderCall<'_>) -> Result<ProviderReply, ProviderError> {
        Err(ProviderError::new(
            FailureKind::Invalid,
            format!(
                "provider `{}` makes embeddings only (model `{}`)",
                self.name, self.model
            ),
        ))
    }

    async fn embed(
        &self,
        model: &str,
        inputs: &[String],
    ) -> Result<stead_model::EmbedReply, ProviderError> {
        if model != self.model {
            return Err(ProviderError::new(
                FailureKind::Invalid,
                format!(
                    "provider `{}` serves the model `{}`, not `{model}`",
                    self.name, self.model
                ),
            ));
        }
        let embedded = self
            .pool
            .embed_counted(inputs.to_vec())
            .await
            .map_err(failure)?;
        Ok(stead_model::EmbedReply {
            vectors: embedded.vectors,
            prompt_tokens: embedded.tokens,
            model: self.model.clone(),
        })
    }

    fn metrics(&self) -> Vec<ProviderMetric> {
        let (runs, texts) = self.pool.counts();
        vec![
            ProviderMetric {
                name: "stead_embedding_runs_total",
                help: "Runs of the local embedding model (each embeds a batch of texts)",
                counter: true,
                model: self.model.clone(),
                value: runs as f64,
            },
            ProviderMetric {
                name: "stead_embedding_texts_total",
                help: "Texts embedded by the local embedding model",
                counter: true,
                model: self.model.clone(),
                value: texts as f64,
            },
        ]
    }
}

//! The local engines a configuration names, started before the router that routes to them:
//! one inference pool per `onnx` provider and one embedding pool per `onnx_embedding`
//! provider whose model is prepared.

use std::sync::Arc;

use stead_config::Config;

/// Starts the pooled engine of every `onnx` provider whose model is prepared. A provider whose
/// model directory is missing is skipped with a warning (run `stead setup`); one that cannot
/// start (say, `execution_provider = "cuda"` without CUDA) stops the server from starting.
pub async fn start_local_models(
    config: &Config,
) -> anyhow::Result<Vec<(String, Arc<stead_inference::pool::InferencePool>)>> {
    use stead_inference::pool::{InferencePool, PoolConfig};
    let mut pools = Vec::new();
    for (index, provider) in config.providers.iter().enumerate() {
        if provider.kind != stead_config::ProviderKind::Onnx {
            continue;
        }
        let Some(model_dir) = provider.model_dir.clone() else {
            anyhow::bail!("providers[{index}].model_dir: an onnx provider needs one");
        };
        if !model_dir.join("stead_model.json").is_file() {
            tracing::warn!(
                provider = %provider.name,
                model_dir = %model_dir.display(),
                "local model not prepared; run `stead setup` (the provider is unavailable)"
            );
            continue;
        }
        let name = model_dir.file_name().map_or_else(
            || provider.name.clone(),
            |n| n.to_string_lossy().into_owned(),
        );
        let engine = &provider.engine;
        let mut pool = PoolConfig::new(
            name,
            model_dir,
            stead_inference::setup::runtime_library(&config.server.data_dir),
        );
        pool.execution_provider = engine.execution_provider;
        pool.workers = engine.workers;
        pool.threads_per_worker = engine.threads_per_worker;
        pool.max_batch = engine.max_batch;
        pool.queue_capacity = engine.queue_capacity;
        pool.prefix_cache_bytes = engine.prefix_cache_bytes;
        pool.prefix_cache_min_tokens = engine.prefix_cache_min_tokens;
        pool.block_repeated_calls = engine.block_repeated_calls;
        pool.adapters = stead_inference::adapt::Adapters {
            tool_result_hint: engine.tool_result_hint,
            digest_history: engine.digest_history,
            small_talk: engine.small_talk,
        };
        let started = InferencePool::start(pool)
            .await
            .map_err(|e| anyhow::anyhow!("providers[{index}] (`{}`): {e}", provider.name))?;
        tracing::info!(
            provider = %provider.name,
            model = %started.model_name(),
            cuda = started.on_cuda,
            "local model ready"
        );
        pools.push((provider.name.clone(), Arc::new(started)));
    }
    Ok(pools)
}

/// A started local embedding pool: its provider's name, its model's name and the pool.
pub type EmbeddingModel = (
    String,
    String,
    Arc<stead_inference::embedding_pool::EmbeddingPool>,
);

/// Starts the embedding pool of every `onnx_embedding` provider whose model is prepared (one
/// that is not is skipped with a warning, like a chat model).
pub async fn start_embedding_models(config: &Config) -> anyhow::Result<Vec<EmbeddingModel>> {
    use stead_inference::embedding_pool::{EmbeddingPool, EmbeddingPoolConfig};
    let mut started = Vec::new();
    for (index, provider) in config.providers.iter().enumerate() {
        if provider.kind != stead_config::ProviderKind::OnnxEmbedding {
            continue;
        }
        let Some(model_dir) = provider.model_dir.clone() else {
            anyhow::bail!("providers[{index}].model_dir: an onnx_embedding provider needs one");
        };
        let (onnx, tokenizer) = stead_inference::embedding::model_files(&model_dir);
        if !onnx.is_file() || !tokenizer.is_file() {
            tracing::warn!(
                provider = %provider.name,
                model_dir = %model_dir.display(),
                "embedding model not prepared; run `stead setup` (the provider is unavailable)"
            );
            continue;
        }
        let model = model_dir.file_name().map_or_else(
            || provider.name.clone(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut pool = EmbeddingPoolConfig::new(
            model_dir,
            stead_inference::setup::runtime_library(&config.server.data_dir),
        );
        pool.workers = provider.engine.workers;
        pool.threads = provider.engine.threads_per_worker;
        pool.max_batch = provider.engine.max_batch;
        pool.queue_capacity = provider.engine.queue_capacity;
        let pool = EmbeddingPool::start(pool)
            .await
            .map_err(|e| anyhow::anyhow!("providers[{index}] (`{}`): {e}", provider.name))?;
        tracing::info!(provider = %provider.name, model = %model, dimension = pool.dimension(),
            "local embedding model ready");
        started.push((provider.name.clone(), model, Arc::new(pool)));
    }
    Ok(started)
}

pub async fn stop_local_models(pools: &[(String, Arc<stead_inference::pool::InferencePool>)]) {
    for (_, pool) in pools {
        pool.shutdown().await;
    }
}

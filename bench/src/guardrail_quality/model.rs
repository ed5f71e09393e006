//! The `injection` guardrail's `route` option, measured: the local model asked the injection
//! rubric about a sample of the injection texts — the system and user messages a guardrail's
//! model check sends ([`stead_guardrails::judge`]), greedy — and its answer parsed strictly as
//! the guardrail parses it. An answer that is not the verdict object is the checker's error,
//! which blocks by default, so it counts as flagged.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use serde_json::Value;
use stead_guardrails::judge::{parse, system_prompt, user_prompt, INJECTION_RUBRIC};
use stead_inference::pool::{InferencePool, PoolConfig};
use stead_inference::{setup, ChatMessage, ChatRequest, SamplingParams};

/// What the model said of each sampled text.
pub(super) struct Asked {
    /// Indices into the texts, every k-th.
    pub sample: Vec<usize>,
    /// `Some(flagged)`, or `None`: the answer was not the verdict object.
    pub verdicts: Vec<Option<bool>>,
    pub seconds: f64,
    pub model: String,
}

/// Asks `model` (prepared under `data_dir`) about `n` of `texts`, spread evenly, eight at once
/// (the engine batches them).
pub(super) async fn ask(
    data_dir: &Path,
    model: &str,
    texts: &[Value],
    n: usize,
) -> anyhow::Result<Asked> {
    let step = (texts.len() / n.max(1)).max(1);
    let sample: Vec<usize> = (0..texts.len()).step_by(step).take(n).collect();
    let mut config = PoolConfig::new(
        model,
        setup::model_dir(data_dir, model),
        setup::runtime_library(data_dir),
    );
    config.max_batch = 8;
    let pool = InferencePool::start(config)
        .await
        .context("start the inference pool (run `stead setup` first)")?;
    let system = system_prompt(INJECTION_RUBRIC);
    let started = Instant::now();
    let mut verdicts = Vec::with_capacity(sample.len());
    for chunk in sample.chunks(8) {
        let asks = chunk.iter().map(|&i| {
            let text = texts[i]["text"].as_str().unwrap_or_default();
            pool.complete(ChatRequest {
                messages: vec![
                    ChatMessage::system(&system),
                    ChatMessage::user(user_prompt(text)),
                ],
                sampling: SamplingParams {
                    max_tokens: 64,
                    ..Default::default()
                },
                ..Default::default()
            })
        });
        for answer in futures_util::future::join_all(asks).await {
            let answer = answer?;
            verdicts.push(parse(&answer.text).ok().map(|v| !v.pass));
        }
        eprint!("\r  the model: {}/{} texts", verdicts.len(), sample.len());
    }
    eprintln!();
    let seconds = started.elapsed().as_secs_f64();
    pool.shutdown().await;
    Ok(Asked {
        sample,
        verdicts,
        seconds,
        model: model.to_string(),
    })
}

//! `stead bench knowledge` (docs/benchmarks.md). `--part embed` (this module):
//! embedding throughput of the local
//! embedding model (`models/all-minilm-l6-v2`, prepared by `stead setup`) through Stead's
//! embedding pool, against Python `onnxruntime` on the same `model.onnx`, fed the same token
//! ids, batched and pooled the same way, side by side in one run. The chunks are synthetic
//! English-like text of about `--words` words each (deterministic), so runs compare.
//! `--part query` is `knowledge_query`, `--part eval` is `knowledge_eval`.

use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};
use stead_inference::embedding::{Embedder, DEFAULT_EMBEDDING_MODEL};
use stead_inference::embedding_pool::{EmbeddingPool, EmbeddingPoolConfig};

use crate::cli::{KnowledgeBenchArgs, KnowledgePart};
use stead_config::Config;

const PEER_SCRIPT: &str = include_str!("knowledge.py");

const WORDS: &[&str] = &[
    "session", "agent", "journal", "durable", "approval", "tool", "model", "router", "replay",
    "state", "event", "node", "cluster", "lease", "budget", "schedule", "message", "client",
    "server", "database", "recovery", "crash", "stream", "token", "batch", "engine", "query",
    "document", "chunk", "vector", "search", "answer", "question", "policy", "request", "timeout",
    "the", "a", "of", "and", "to", "in", "is", "for", "with", "on", "after", "before", "every",
    "each", "runs", "keeps", "writes", "reads", "checks", "waits", "sends", "fails", "resumes",
];

/// `count` chunks of about `words` words, the same every run.
fn chunks(count: usize, words: usize) -> Vec<String> {
    let mut state: u64 = 0x5eed;
    (0..count)
        .map(|_| {
            (0..words)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    WORDS[(state >> 33) as usize % WORDS.len()]
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

pub async fn knowledge(config: Config, args: KnowledgeBenchArgs) -> anyhow::Result<ExitCode> {
    let report = match args.part {
        KnowledgePart::Embed => return embed(config, args).await,
        KnowledgePart::Query => super::knowledge_query::query(&config, &args).await?,
        KnowledgePart::Eval => super::knowledge_eval::eval(&config, &args).await?,
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}

async fn embed(config: Config, args: KnowledgeBenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.chunks > 0 && args.batch > 0 && args.words > 0,
        "--chunks, --batch and --words must be at least 1"
    );
    let data = &config.server.data_dir;
    let model_dir = data.join("models").join(DEFAULT_EMBEDDING_MODEL);
    let runtime = stead_inference::setup::runtime_library(data);
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let texts = chunks(args.chunks, args.words);

    // Stead: the embedding pool as the built-in provider runs it (its sessions and their
    // threads), one request of `--batch` chunks at a time.
    let engine = config
        .providers
        .iter()
        .find(|p| p.kind == stead_config::ProviderKind::OnnxEmbedding)
        .map(|p| p.engine.clone())
        .unwrap_or_default();
    let mut pool_config = EmbeddingPoolConfig::new(model_dir.clone(), runtime.clone());
    pool_config.workers = engine.workers;
    pool_config.threads = engine.threads_per_worker;
    pool_config.max_batch = args.batch;
    let pool = EmbeddingPool::start(pool_config)
        .await
        .context("the embedding model (run `stead setup`)")?;
    pool.embed(texts[..args.batch.min(texts.len())].to_vec())
        .await?; // warm-up
    let started = Instant::now();
    let mut first = None;
    for batch in texts.chunks(args.batch) {
        let vectors = pool.embed(batch.to_vec()).await?;
        first.get_or_insert_with(|| vectors[0].clone());
        eprint!(".");
    }
    eprintln!();
    let seconds = started.elapsed().as_secs_f64();
    let stead_rate = texts.len() as f64 / seconds;
    let first = first.unwrap_or_default();

    let env = stead_inference::engine::init_runtime(&runtime)?;
    let tokenizer = Embedder::load(&env, &model_dir, 1)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let ids = tokenizer.token_ids(&refs)?;
    let tokens: usize = ids.iter().map(Vec::len).sum();

    let peer = if args.no_peer {
        Value::Null
    } else {
        let python = data.join("setup").join("venv").join("bin").join("python");
        anyhow::ensure!(
            python.is_file(),
            "{} is missing: run `stead setup` (or pass --no-peer)",
            python.display()
        );
        let dir = tempfile::tempdir()?;
        let job = dir.path().join("job.json");
        std::fs::write(
            &job,
            serde_json::to_vec(&json!({
                "model": model_dir.join("model.onnx"),
                "threads": threads,
                "batch": args.batch,
                "rows": ids,
            }))?,
        )?;
        let script = dir.path().join("peer.py");
        std::fs::write(&script, PEER_SCRIPT)?;
        eprintln!("peer: Python onnxruntime on the same model and token ids");
        let output = Command::new(&python).arg(&script).arg(&job).output()?;
        anyhow::ensure!(
            output.status.success(),
            "the peer failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let answer: Value = serde_json::from_slice(&output.stdout)?;
        // Same inputs, same model: the vectors agree.
        let theirs: Vec<f32> = answer["first"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(Value::as_f64)
                    .map(|x| x as f32)
                    .collect()
            })
            .unwrap_or_default();
        let cosine: f32 = first.iter().zip(&theirs).map(|(a, b)| a * b).sum();
        json!({
            "onnxruntime": answer["onnxruntime"],
            "chunks_per_s": answer["chunks_per_s"],
            "cosine_with_stead": cosine,
        })
    };
    let report = json!({
        "chunks": texts.len(),
        "tokens_per_chunk": tokens as f64 / texts.len() as f64,
        "batch": args.batch,
        "threads": threads,
        "stead_sessions": engine.workers.max(1),
        "stead": { "chunks_per_s": stead_rate, "seconds": seconds },
        "peer": peer,
    });
    if args.json {
        println!("{report}");
    } else {
        println!(
            "embeddings ({DEFAULT_EMBEDDING_MODEL}, {} chunks of {:.0} tokens, batches of {}, {} threads): \
             stead {:.1} chunks/s ({} sessions)",
            texts.len(),
            report["tokens_per_chunk"].as_f64().unwrap_or_default(),
            args.batch,
            threads,
            stead_rate,
            engine.workers.max(1)
        );
        if let Some(rate) = report["peer"]["chunks_per_s"].as_f64() {
            println!(
                "  Python onnxruntime {} on the same model and ids: {:.1} chunks/s (stead/peer {:.2}, target ≥ 1.10; \
                 cosine of the first vectors {:.5})",
                report["peer"]["onnxruntime"].as_str().unwrap_or("?"),
                rate,
                stead_rate / rate,
                report["peer"]["cosine_with_stead"].as_f64().unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

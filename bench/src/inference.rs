//! `stead bench inference`: the pooled local engine against the peer, side by side.
//!
//! Measures, on the prepared default model: time to first token (p50/p99 over sequential
//! requests), single-stream decode speed, aggregate decode speed at 1, 2, 4 and 8 concurrent
//! streams (continuous batching), and cancel-to-stop latency. Then it runs the peer, Python
//! `onnxruntime-genai` generating from the very same model directory, with the same prompt,
//! token budget and thread count, and prints the ratios.

use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};
use stead_inference::engine::ExecutionProvider;
use stead_inference::pool::{physical_cores, InferencePool, PoolConfig};
use stead_inference::setup;
use stead_inference::{ChatMessage, ChatRequest, SamplingParams, StreamEvent};

use crate::cli::InferenceBenchArgs;
use stead_config::Config;

const PROMPT: &str = "Write a long story about a lighthouse keeper and a storm.";

/// Starts a benchmark's pool, saying what it loads.
pub(crate) async fn start_pool(
    config: PoolConfig,
    threads: usize,
) -> anyhow::Result<InferencePool> {
    eprintln!(
        "loading {} ({threads} intra-op threads)…",
        config.model_dir.display()
    );
    InferencePool::start(config)
        .await
        .context("start the inference pool (run `stead setup` first)")
}

/// `streams` generations started together: tokens per second of wall time, all together.
pub(crate) async fn aggregate_once(
    pool: &InferencePool,
    streams: usize,
    max_tokens: usize,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let generation = pool.generate(request(max_tokens)).await?;
        tasks.push(tokio::spawn(generation.collect()));
    }
    let mut tokens = 0;
    for task in tasks {
        tokens += task.await??.usage.completion_tokens;
    }
    Ok(tokens as f64 / started.elapsed().as_secs_f64())
}

pub(crate) fn request(max_tokens: usize) -> ChatRequest {
    ChatRequest {
        // Empty: whichever model the pool serves.
        model: String::new(),
        messages: vec![ChatMessage::user(PROMPT)],
        sampling: SamplingParams {
            max_tokens,
            // Exactly `max_tokens` per stream, as the peer does, so both decode the same work.
            ignore_eos: true,
            ..Default::default()
        },
        assistant_prefix: String::new(),
        ..Default::default()
    }
}

/// Starts `n` background generations that run until dropped.
async fn background_streams(
    pool: &InferencePool,
    n: usize,
) -> anyhow::Result<Vec<stead_inference::pool::Generation>> {
    let mut streams = Vec::new();
    for _ in 0..n {
        streams.push(pool.generate(request(256)).await?);
    }
    Ok(streams)
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
    values[rank.min(values.len() - 1)]
}

pub async fn inference(config: Config, args: InferenceBenchArgs) -> anyhow::Result<()> {
    let data = config.server.data_dir.clone();
    let model_dir = setup::model_dir(&data, &args.model);
    let mut pool_config = PoolConfig::new(
        &args.model,
        model_dir.clone(),
        args.runtime_library
            .clone()
            .unwrap_or_else(|| setup::runtime_library(&data)),
    );
    pool_config.execution_provider = match args.execution_provider.as_str() {
        "cuda" => ExecutionProvider::Cuda,
        "auto" => ExecutionProvider::Auto,
        _ => ExecutionProvider::Cpu,
    };
    pool_config.max_batch = 8;
    pool_config.queue_capacity = 64;
    // Every figure but the agent turn's is of cold prompts, as the peer sees them (its runs
    // repeat one prompt, which a prefix cache would serve).
    let agent_pool = pool_config.clone();
    pool_config.prefix_cache_bytes = 0;
    let threads = physical_cores();
    let pool = start_pool(pool_config, threads).await?;

    let on_cuda = pool.on_cuda;
    let prompt_ids = pool.prompt_tokens(request(args.max_tokens))?;
    // Warm-up: the first run pays one-time allocations.
    pool.complete(request(8)).await?;

    eprintln!(
        "single stream: {} runs × {} tokens",
        args.runs, args.max_tokens
    );
    let mut ttft = Vec::new();
    let mut decode = Vec::new();
    for run in 0..args.runs {
        let completion = pool.complete(request(args.max_tokens)).await?;
        ttft.push(completion.timings.ttft_ms);
        let tokens = completion.usage.completion_tokens.saturating_sub(1) as f64;
        let seconds = (completion.timings.total_ms - completion.timings.ttft_ms) / 1e3;
        if tokens > 0.0 && seconds > 0.0 {
            decode.push(tokens / seconds);
        }
        eprint!("\r  progress: {}/{} runs", run + 1, args.runs);
    }
    eprintln!();
    let single = percentile(&mut decode.clone(), 50.0);

    let mut aggregate = Vec::new();
    for &streams in &[1usize, 2, 4, 8] {
        eprintln!("aggregate: {streams} concurrent streams");
        // A warm-up at this batch size first, as the peer has (new shapes allocate).
        aggregate_once(&pool, streams, args.max_tokens).await?;
        aggregate.push((
            streams,
            aggregate_once(&pool, streams, args.max_tokens).await?,
        ));
    }

    eprintln!("cancel-to-stop: {} trials", args.runs.max(10));
    let mut cancel_ms = Vec::new();
    for _ in 0..args.runs.max(10) {
        // Measured while other streams decode, as in a busy server.
        let _background = background_streams(&pool, 3).await?;
        let mut generation = pool.generate(request(256)).await?;
        let mut seen = 0;
        while seen < 4 {
            match generation.next().await {
                Some(StreamEvent::Delta(_)) => seen += 1,
                Some(_) | None => break,
            }
        }
        let cancelled = Instant::now();
        generation.cancel();
        while let Some(event) = generation.next().await {
            match event {
                StreamEvent::Done(completion) => {
                    anyhow::ensure!(
                        completion.finish_reason == stead_inference::FinishReason::Cancelled,
                        "the cancel trial ended by itself ({:?})",
                        completion.finish_reason
                    );
                    cancel_ms.push(cancelled.elapsed().as_secs_f64() * 1e3);
                    break;
                }
                StreamEvent::Failed(error) => return Err(error.into()),
                StreamEvent::Delta(_) => {}
            }
        }
    }
    pool.shutdown().await;
    let (agent_turn, turn_ids) = if args.agent_steps > 0 {
        super::agent_turn::agent_turn(&config, &agent_pool, args.agent_steps).await?
    } else {
        (Value::Null, Vec::new())
    };

    let stead = json!({
        "ttft_ms_p50": percentile(&mut ttft.clone(), 50.0),
        "ttft_ms_p99": percentile(&mut ttft, 99.0),
        "decode_tok_s": single,
        "aggregate_tok_s": aggregate.iter().map(|(c, t)| json!({ "streams": c, "tok_s": t })).collect::<Vec<_>>(),
        "cancel_to_stop_ms_p50": percentile(&mut cancel_ms.clone(), 50.0),
        "cancel_to_stop_ms_p95": percentile(&mut cancel_ms, 95.0),
        "agent_turn": agent_turn,
    });
    let peer = if args.no_peer {
        Value::Null
    } else {
        eprintln!("peer: onnxruntime-genai on the same model directory");
        run_peer(&data, &model_dir, &args, threads).unwrap_or_else(|e| {
            eprintln!("peer failed: {e:#}");
            json!({ "error": format!("{e:#}") })
        })
    };
    let llama = if args.no_peer {
        Value::Null
    } else {
        eprintln!("peer: llama.cpp (llama-cpp-python) on the same GGUF");
        run_llama(&data, &model_dir, &args, threads, &prompt_ids, &turn_ids).unwrap_or_else(|e| {
            eprintln!("llama.cpp peer failed: {e:#}");
            json!({ "error": format!("{e:#}") })
        })
    };
    let result = json!({ "model": args.model, "execution_provider": args.execution_provider, "on_cuda": on_cuda, "threads": threads, "max_tokens": args.max_tokens, "runs": args.runs, "prompt_tokens": prompt_ids.len(), "stead": stead, "peer": peer, "llama_cpp": llama });
    if args.json {
        println!("{result}");
        return Ok(());
    }
    print_report(&result);
    Ok(())
}

fn print_report(result: &Value) {
    let s = &result["stead"];
    let p = &result["peer"];
    let l = &result["llama_cpp"];
    let f = one_decimal;
    println!(
        "inference bench: {} · {} threads · {} new tokens · greedy",
        result["model"].as_str().unwrap_or_default(),
        result["threads"],
        result["max_tokens"]
    );
    println!(
        "  {:<34} {:>10} {:>10} {:>8} {:>10} {:>8}",
        "", "stead", "genai", "ratio", "llama.cpp", "ratio"
    );
    let ratio = |a: &Value, b: &Value, higher_is_better: bool| match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 => {
            format!("{:.2}×", if higher_is_better { a / b } else { b / a })
        }
        _ => "—".into(),
    };
    let row = |name: &str, a: &Value, b: &Value, c: &Value, higher_is_better: bool| {
        println!(
            "  {name:<34} {:>10} {:>10} {:>8} {:>10} {:>8}",
            f(a),
            f(b),
            ratio(a, b, higher_is_better),
            f(c),
            ratio(a, c, higher_is_better)
        );
    };
    let lb = &l["bench"];
    row(
        "TTFT p50 (ms)",
        &s["ttft_ms_p50"],
        &p["ttft_ms_p50"],
        &lb["ttft_ms_p50"],
        false,
    );
    row(
        "TTFT p99 (ms)",
        &s["ttft_ms_p99"],
        &p["ttft_ms_p99"],
        &lb["ttft_ms_p99"],
        false,
    );
    // Prefill throughput, derived: the single-stream prompt over its TTFT p50 (all three), and
    // the agent turn's cold prompts (494 → ~2,400 tokens) over their uncached TTFTs.
    let per_second = |tokens: f64, ms: &Value| {
        ms.as_f64()
            .filter(|&ms| ms > 0.0)
            .map_or(Value::Null, |ms| json!(tokens / ms * 1e3))
    };
    let prompt = result["prompt_tokens"].as_f64().unwrap_or(0.0);
    row(
        &format!("prefill, {prompt}-token prompt (tok/s)"),
        &per_second(prompt, &s["ttft_ms_p50"]),
        &per_second(prompt, &p["ttft_ms_p50"]),
        &per_second(prompt, &lb["ttft_ms_p50"]),
        true,
    );
    let turn_prefill = |tokens: &Value, ms: &Value| {
        let sum = |v: &Value| -> f64 {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_f64)
                .sum()
        };
        per_second(sum(tokens), &json!(sum(ms)))
    };
    let turn_tokens = &s["agent_turn"]["prompt_tokens"];
    if turn_tokens.is_array() {
        row(
            "prefill, agent-turn prompts (tok/s)",
            &turn_prefill(turn_tokens, &s["agent_turn"]["ttft_ms_off"]),
            &Value::Null,
            &turn_prefill(turn_tokens, &l["turn"]["ttft_ms_off"]),
            true,
        );
    }
    row(
        "single-stream decode (tok/s)",
        &s["decode_tok_s"],
        &p["decode_tok_s"],
        &lb["decode_tok_s"],
        true,
    );
    let peer_aggregate = |streams: u64| {
        p["aggregate_tok_s"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["streams"] == streams))
            .map_or(Value::Null, |x| x["tok_s"].clone())
    };
    for entry in s["aggregate_tok_s"].as_array().into_iter().flatten() {
        let streams = entry["streams"].as_u64().unwrap_or(0);
        row(
            &format!("aggregate, {streams} streams (tok/s)"),
            &entry["tok_s"],
            &peer_aggregate(streams),
            &Value::Null,
            true,
        );
    }
    let single = s["decode_tok_s"].as_f64().unwrap_or(0.0);
    let at8 = s["aggregate_tok_s"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["streams"] == 8))
        .and_then(|x| x["tok_s"].as_f64())
        .unwrap_or(0.0);
    if single > 0.0 {
        println!(
            "  aggregate at 8 streams ÷ single stream: {:.2}×",
            at8 / single
        );
    }
    println!(
        "  cancel-to-stop: p50 {} ms · p95 {} ms",
        f(&s["cancel_to_stop_ms_p50"]),
        f(&s["cancel_to_stop_ms_p95"])
    );
    print_agent_turns(&s["agent_turn"], &l["turn"]);
    if let Some(error) = p["error"].as_str() {
        println!("  peer: {error}");
    } else if let Some(name) = p["peer"].as_str() {
        println!("  peer: {name}");
    }
    if let Some(error) = l["error"].as_str() {
        println!("  llama.cpp: {error}");
    }
}

/// A figure with one decimal, or a dash.
fn one_decimal(v: &Value) -> String {
    v.as_f64().map_or("—".to_string(), |x| format!("{x:.1}"))
}

/// The agent turn's figures: Stead's TTFT per step with and without the prefix cache
/// (`turn`), and llama.cpp's on the same prompts (`lt`).
fn print_agent_turns(turn: &Value, lt: &Value) {
    let f = one_decimal;
    if !turn.is_null() {
        println!(
            "  agent turn, {} steps (prompt {} → {} tokens): TTFT p50 of steps 2+ {} ms cached, \
             {} ms uncached ({:.0} %)",
            turn["steps"],
            turn["prompt_tokens"][0],
            turn["prompt_tokens"]
                .as_array()
                .and_then(|a| a.last())
                .unwrap_or(&Value::Null),
            f(&turn["later_steps_ttft_ms_p50_on"]),
            f(&turn["later_steps_ttft_ms_p50_off"]),
            turn["later_steps_on_over_off"].as_f64().unwrap_or(0.0) * 100.0
        );
        println!(
            "    per step, uncached/cached TTFT (ms): {}",
            turn["ttft_ms_off"]
                .as_array()
                .into_iter()
                .flatten()
                .zip(turn["ttft_ms_on"].as_array().into_iter().flatten())
                .map(|(a, b)| format!("{}/{}", f(a), f(b)))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    if !lt.is_null() {
        println!(
            "  llama.cpp, the same turn's prompts: TTFT p50 of steps 2+ {} ms with its prompt \
             cache, {} ms without",
            f(&lt["later_steps_ttft_ms_p50_on"]),
            f(&lt["later_steps_ttft_ms_p50_off"]),
        );
    }
}

/// Runs llama.cpp (llama-cpp-python, in its own virtual environment, built from source on first
/// use) on the GGUF the model was converted from: the single-stream figures on the same prompt
/// tokens, and the agent turn's prompts without and with its prompt cache.
fn run_llama(
    data: &std::path::Path,
    model_dir: &std::path::Path,
    args: &InferenceBenchArgs,
    threads: usize,
    prompt_ids: &[u32],
    turn_ids: &[Vec<u32>],
) -> anyhow::Result<Value> {
    let gguf = setup::source_gguf(model_dir)
        .with_context(|| format!("{} records no source GGUF", model_dir.display()))?;
    let dir = data.join("setup").join("llama");
    let python = setup::ensure_venv(
        &dir,
        "python3",
        setup::LLAMA_REQUIREMENTS,
        "llama-cpp-python (compiles llama.cpp: ~10 minutes the first time)",
        &[("CMAKE_ARGS", setup::LLAMA_CMAKE_ARGS)],
        &mut |line| eprintln!("{line}"),
    )?;
    let script = dir.join("peer_llama.py");
    std::fs::write(&script, setup::LLAMA_SCRIPT)?;
    let run = |command: &str, file: &std::path::Path, extra: &[String]| -> anyhow::Result<Value> {
        let flag = if command == "bench" {
            "--prompt-ids"
        } else {
            "--steps-ids"
        };
        let output = Command::new(&python)
            .arg(&script)
            .arg(command)
            .arg("--gguf")
            .arg(&gguf)
            .arg(flag)
            .arg(file)
            .args(["--threads", &threads.to_string()])
            .args(extra)
            .stderr(std::process::Stdio::inherit())
            .output()?;
        anyhow::ensure!(
            output.status.success(),
            "llama.cpp peer exited with {}",
            output.status
        );
        let text = String::from_utf8_lossy(&output.stdout);
        serde_json::from_str(text.trim().lines().last().unwrap_or_default())
            .context("llama.cpp peer output is not JSON")
    };
    let scratch = tempfile::tempdir()?;
    let prompt_file = scratch.path().join("prompt.json");
    std::fs::write(&prompt_file, serde_json::to_string(prompt_ids)?)?;
    let bench = run(
        "bench",
        &prompt_file,
        &[
            "--max-tokens".into(),
            args.max_tokens.to_string(),
            "--runs".into(),
            args.runs.to_string(),
        ],
    )?;
    let turn = if turn_ids.is_empty() {
        Value::Null
    } else {
        let steps_file = scratch.path().join("steps.json");
        std::fs::write(&steps_file, serde_json::to_string(turn_ids)?)?;
        run("turn", &steps_file, &[])?
    };
    Ok(json!({ "peer": "llama-cpp-python 0.3.36", "gguf": gguf, "bench": bench, "turn": turn }))
}

/// Runs the peer script in its own virtual environment (created on first use from PyPI).
fn run_peer(
    data: &std::path::Path,
    model_dir: &std::path::Path,
    args: &InferenceBenchArgs,
    threads: usize,
) -> anyhow::Result<Value> {
    let peer = GenaiPeer::prepare(data)?;
    let mut aggregate = Vec::new();
    let mut single = Value::Null;
    for streams in [1usize, 2, 4, 8] {
        let value = peer.run(model_dir, args.max_tokens, args.runs, streams, threads)?;
        aggregate.push(json!({ "streams": streams, "tok_s": value["aggregate_tok_s"] }));
        if streams == 1 {
            single = value;
        }
    }
    single["aggregate_tok_s"] = Value::Array(aggregate);
    Ok(single)
}

/// onnxruntime-genai, the peer, in its own virtual environment (created on first use from PyPI).
pub(crate) struct GenaiPeer {
    python: std::path::PathBuf,
    script: std::path::PathBuf,
}

impl GenaiPeer {
    pub(crate) fn prepare(data: &std::path::Path) -> anyhow::Result<Self> {
        let dir = data.join("setup").join("peer");
        let python = setup::ensure_venv(
            &dir,
            "python3",
            setup::PEER_REQUIREMENTS,
            "the peer (onnxruntime-genai)",
            &[],
            &mut |line| eprintln!("{line}"),
        )?;
        let script = dir.join("peer_genai_bench.py");
        std::fs::write(&script, setup::PEER_SCRIPT)?;
        Ok(GenaiPeer { python, script })
    }

    /// One run of the peer script: `runs` single streams, then (when `streams` > 1) `runs`
    /// batches of `streams` rows; its JSON line.
    pub(crate) fn run(
        &self,
        model_dir: &std::path::Path,
        max_tokens: usize,
        runs: usize,
        streams: usize,
        threads: usize,
    ) -> anyhow::Result<Value> {
        let output = Command::new(&self.python)
            .arg(&self.script)
            .arg("--model")
            .arg(model_dir)
            .args(["--prompt", PROMPT])
            .args(["--max-tokens", &max_tokens.to_string()])
            .args(["--runs", &runs.to_string()])
            .args(["--concurrency", &streams.to_string()])
            .args(["--threads", &threads.to_string()])
            .output()?;
        anyhow::ensure!(
            output.status.success(),
            "peer exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        );
        let line = String::from_utf8_lossy(&output.stdout);
        serde_json::from_str(line.trim().lines().last().unwrap_or_default())
            .context("peer output is not JSON")
    }
}

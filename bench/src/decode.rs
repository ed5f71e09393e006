//! `stead bench decode`: the local engine's decode speed against onnxruntime-genai's on the
//! same `model.onnx`, in rounds that alternate which side goes first. This machine's speed
//! drifts by 10–20 % within minutes, so two figures taken one after the other can differ by
//! more than the engines do; each round's ratio pairs figures taken minutes apart, and the
//! median of the rounds' ratios is the figure reported.

use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};
use stead_config::Config;
use stead_inference::pool::{physical_cores, InferencePool, PoolConfig};
use stead_inference::setup;

use crate::cli::DecodeBenchArgs;
use crate::inference::{aggregate_once, request, start_pool, GenaiPeer};

/// One side's figures in one round.
#[derive(Clone, Copy)]
struct Figures {
    /// Median single-stream decode (tokens after the first ÷ time after the first).
    single: f64,
    /// Median aggregate of `streams` generations started together (all tokens ÷ wall time).
    aggregate: f64,
}

pub async fn decode(config: Config, args: DecodeBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.rounds >= 1 && args.runs >= 1 && args.max_tokens >= 2 && args.streams >= 1,
        "need --rounds, --runs, --streams >= 1 and --max-tokens >= 2"
    );
    let data = config.server.data_dir.clone();
    let model_dir = setup::model_dir(&data, &args.model);
    let mut pool_config = PoolConfig::new(
        &args.model,
        model_dir.clone(),
        setup::runtime_library(&data),
    );
    pool_config.max_batch = args.streams.max(1);
    pool_config.queue_capacity = 64;
    // Cold prompts, as the peer sees them: every run repeats one prompt.
    pool_config.prefix_cache_bytes = 0;
    let threads = physical_cores();
    let peer = GenaiPeer::prepare(&data)?;
    let pool = start_pool(pool_config, threads).await?;
    // Warm-up at both batch sizes: first runs pay one-time allocations (the peer warms up too).
    aggregate_once(&pool, 1, args.max_tokens).await?;
    aggregate_once(&pool, args.streams, args.max_tokens).await?;

    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        let stead_first = round % 2 == 0;
        eprintln!(
            "round {}/{}: {} first",
            round + 1,
            args.rounds,
            if stead_first { "stead" } else { "genai" }
        );
        let genai_round = || genai_round(&peer, &model_dir, &args, threads);
        let (stead, genai) = if stead_first {
            let stead = stead_round(&pool, &args).await?;
            (stead, genai_round()?)
        } else {
            let genai = genai_round()?;
            (stead_round(&pool, &args).await?, genai)
        };
        rounds.push(json!({
            "first": if stead_first { "stead" } else { "genai" },
            "stead_decode_tok_s": stead.single,
            "genai_decode_tok_s": genai.single,
            "decode_ratio": stead.single / genai.single,
            "stead_aggregate_tok_s": stead.aggregate,
            "genai_aggregate_tok_s": genai.aggregate,
            "aggregate_ratio": stead.aggregate / genai.aggregate,
        }));
    }
    pool.shutdown().await;
    let median_of = |key: &str| {
        median(
            rounds
                .iter()
                .filter_map(|r| r[key].as_f64())
                .collect::<Vec<_>>(),
        )
    };
    let result = json!({
        "model": args.model,
        "threads": threads,
        "max_tokens": args.max_tokens,
        "runs": args.runs,
        "streams": args.streams,
        "rounds": rounds,
        "decode_ratio_median": median_of("decode_ratio"),
        "aggregate_ratio_median": median_of("aggregate_ratio"),
        "peer": "onnxruntime-genai (inference/setup/peer_genai_bench.py)",
    });
    if args.json {
        println!("{result}");
    } else {
        print_report(&result);
    }
    Ok(())
}

/// The peer's figures for one round: its medians of `runs` single streams and of `runs`
/// batches of `streams` rows.
fn genai_round(
    peer: &GenaiPeer,
    model_dir: &std::path::Path,
    args: &DecodeBenchArgs,
    threads: usize,
) -> anyhow::Result<Figures> {
    let value = peer.run(model_dir, args.max_tokens, args.runs, args.streams, threads)?;
    let figure = |key: &str| {
        value[key]
            .as_f64()
            .with_context(|| format!("the peer printed no {key}"))
    };
    Ok(Figures {
        single: figure("decode_tok_s")?,
        aggregate: figure("aggregate_tok_s")?,
    })
}

/// Stead's figures for one round: `runs` single streams, then `runs` batches of `streams`.
async fn stead_round(pool: &InferencePool, args: &DecodeBenchArgs) -> anyhow::Result<Figures> {
    let mut single = Vec::new();
    for _ in 0..args.runs {
        let started = Instant::now();
        let completion = pool.complete(request(args.max_tokens)).await?;
        let tokens = completion.usage.completion_tokens.saturating_sub(1) as f64;
        let seconds = (completion.timings.total_ms - completion.timings.ttft_ms) / 1e3;
        anyhow::ensure!(
            tokens > 0.0 && seconds > 0.0,
            "a run produced no decode steps ({:?})",
            started.elapsed()
        );
        single.push(tokens / seconds);
    }
    let mut aggregate = Vec::new();
    for _ in 0..args.runs {
        aggregate.push(aggregate_once(pool, args.streams, args.max_tokens).await?);
    }
    Ok(Figures {
        single: median(single),
        aggregate: median(aggregate),
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn print_report(result: &Value) {
    let streams = &result["streams"];
    println!(
        "decode bench: {} · {} threads · {} new tokens · greedy · {} runs a side per round, order alternating",
        result["model"].as_str().unwrap_or_default(),
        result["threads"],
        result["max_tokens"],
        result["runs"],
    );
    println!(
        "  {:<6} {:<6} {:>12} {:>12} {:>7}   {:>12} {:>12} {:>7}",
        "round",
        "first",
        "stead 1×",
        "genai 1×",
        "ratio",
        format!("stead {streams}×"),
        format!("genai {streams}×"),
        "ratio"
    );
    let f = |v: &Value| v.as_f64().map_or("—".into(), |x| format!("{x:.1}"));
    let r = |v: &Value| v.as_f64().map_or("—".into(), |x| format!("{x:.3}×"));
    for (i, round) in result["rounds"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        println!(
            "  {:<6} {:<6} {:>12} {:>12} {:>7}   {:>12} {:>12} {:>7}",
            i + 1,
            round["first"].as_str().unwrap_or_default(),
            f(&round["stead_decode_tok_s"]),
            f(&round["genai_decode_tok_s"]),
            r(&round["decode_ratio"]),
            f(&round["stead_aggregate_tok_s"]),
            f(&round["genai_aggregate_tok_s"]),
            r(&round["aggregate_ratio"]),
        );
    }
    println!(
        "  median of the rounds' ratios: single stream {} · {streams} streams {}  (tok/s; targets ≥ 1.05× and ≥ 1.2×)",
        r(&result["decode_ratio_median"]),
        r(&result["aggregate_ratio_median"]),
    );
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_of_an_odd_count_is_the_middle_value_and_of_an_even_count_the_mean_of_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![5.0]), 5.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}

//! `stead bench gateway`: open-loop load at fixed arrival rates through
//! `/v1/chat/completions` to a fixed-latency upstream double, with the request log on (SQLite),
//! and the same load through LiteLLM's proxy on the same upstream, side by side in one run.
//!
//! Requests are sent at their scheduled times whether or not earlier ones have answered (open
//! loop). The upstream double (inside the bench process) answers each request after a fixed
//! sleep and records how long it held it; a request's **added latency** is its total latency at
//! the client minus that upstream time — the gateway's work both ways and its loopback hops.
//! A run against the upstream directly shows what the client and the double add by themselves.
//! Client, gateway and upstream share the machine.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::extract::State;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::cli::GatewayBenchArgs;
use crate::{process_cpu, process_memory, ServeProcess};
use stead_config::prepare_data_dir;
use stead_config::Config;

/// Upstream hold times (µs) by request number.
type Holds = Arc<Mutex<Vec<u64>>>;

#[derive(Clone)]
struct Double {
    latency: Duration,
    holds: Holds,
}

/// The fixed-latency upstream: a whole `chat.completion` after `latency`.
async fn upstream(latency: Duration, capacity: usize) -> anyhow::Result<(String, Holds)> {
    async fn chat(State(double): State<Double>, body: axum::body::Bytes) -> axum::Json<Value> {
        let started = Instant::now();
        let body: Value = serde_json::from_slice(&body).unwrap_or_default();
        let n: Option<usize> = body["messages"][0]["content"]
            .as_str()
            .and_then(|t| t.strip_prefix("bench "))
            .and_then(|n| n.parse().ok());
        tokio::time::sleep(double.latency).await;
        let answer = json!({
            "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
            "choices": [{ "index": 0, "message": { "role": "assistant", "content": "The answer is forty-two." }, "finish_reason": "stop" }],
            "usage": { "prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18 },
        });
        if let Some(n) = n {
            if let Some(slot) = double
                .holds
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_mut(n)
            {
                *slot = started.elapsed().as_micros() as u64;
            }
        }
        axum::Json(answer)
    }
    let holds: Holds = Arc::new(Mutex::new(vec![0; capacity]));
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(chat))
        .with_state(Double {
            latency,
            holds: holds.clone(),
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, holds))
}

fn start_stead(dir: &Path, upstream: &str) -> anyhow::Result<ServeProcess> {
    ServeProcess::start(
        dir,
        &format!(
            "[[providers]]\nname = \"bench\"\nkind = \"openai\"\nbase_url = \"{upstream}\"\n\n\
             [[routes]]\nname = \"bench\"\ntargets = [{{ provider = \"bench\", model = \"bench\", retry = {{ attempts = 1 }} }}]\n\n\
             [[agents]]\nname = \"bench\"\nroute = \"bench\"\n"
        ),
    )
}

/// A gateway to load: its label, URL, request headers and process (for CPU and memory).
type Target<'a> = (&'a str, String, Vec<(String, String)>, Option<u32>);

/// Removes the bench's scratch directory when the bench ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One load run's figures.
struct Run {
    label: String,
    rate: f64,
    sent: usize,
    ok: usize,
    total: Histogram<u64>,
    added: Histogram<u64>,
    /// How late the client sent, against the schedule.
    lag: Histogram<u64>,
    rss: Option<u64>,
    /// The gateway process's CPU time per answered request.
    cpu_per_request: Option<Duration>,
}

/// Sends `rate` requests per second for `seconds` to `url` (numbering them from `first`), and
/// measures each against the upstream's hold time.
#[allow(clippy::too_many_arguments)]
async fn load(
    label: &str,
    url: &str,
    headers: &[(String, String)],
    model: &str,
    rate: f64,
    seconds: f64,
    first: usize,
    holds: &Holds,
) -> anyhow::Result<Run> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(4096)
        .build()?;
    let count = (rate * seconds).round() as usize;
    // Each answered request's total latency (µs), by its number in this run.
    let results: Arc<Mutex<Vec<Option<u64>>>> = Arc::new(Mutex::new(vec![None; count]));
    let mut lag = Histogram::<u64>::new(3)?;
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due).await;
        lag.record(tokio::time::Instant::now().duration_since(due).as_micros() as u64)?;
        let client = client.clone();
        let url = url.to_string();
        let headers = headers.to_vec();
        let model = model.to_string();
        let results = results.clone();
        tasks.push(tokio::spawn(async move {
            let body = json!({ "model": model, "messages": [{ "role": "user", "content": format!("bench {}", first + i) }], "max_tokens": 16 });
            let sent = Instant::now();
            let mut request = client.post(&url).json(&body);
            for (name, value) in &headers {
                request = request.header(name, value);
            }
            let ok = match request.send().await {
                Ok(response) => {
                    let ok = response.status().is_success();
                    ok && response.bytes().await.is_ok()
                }
                Err(_) => false,
            };
            if ok {
                let total = sent.elapsed().as_micros() as u64;
                results.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(total);
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let mut total = Histogram::<u64>::new(3)?;
    let mut added = Histogram::<u64>::new(3)?;
    let mut ok = 0;
    let holds = holds.lock().unwrap_or_else(PoisonError::into_inner);
    for (i, result) in results
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .enumerate()
    {
        if let Some(t) = result {
            ok += 1;
            total.record(*t)?;
            let hold = holds.get(first + i).copied().unwrap_or(0);
            added.record(t.saturating_sub(hold))?;
        }
    }
    Ok(Run {
        label: label.to_string(),
        rate,
        sent: count,
        ok,
        total,
        added,
        lag,
        rss: None,
        cpu_per_request: None,
    })
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

pub async fn gateway(config: Config, args: GatewayBenchArgs) -> anyhow::Result<()> {
    prepare_data_dir(&config.server.data_dir)?;
    stead_http::raise_fd_limit();
    let rates: Vec<f64> = args
        .rates
        .split(',')
        .map(|r| r.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .context("--rates: comma-separated requests per second")?;
    let per_run = |rate: f64| (rate * (args.seconds + args.warmup)).ceil() as usize + 1;
    let capacity: usize = rates.iter().map(|r| per_run(*r) * 3).sum::<usize>() + 1000;
    let latency = Duration::from_millis(args.upstream_ms);
    let (upstream_url, holds) = upstream(latency, capacity).await?;
    let scratch = config
        .server
        .data_dir
        .join(format!("bench-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let _cleanup = RemoveOnDrop(scratch.clone());
    println!(
        "gateway bench: upstream double answers after {} ms; {} s per rate after {} s warm-up; rates {:?}",
        args.upstream_ms, args.seconds, args.warmup, rates
    );
    let stead = start_stead(&scratch, &upstream_url)?;
    let stead_base = stead.base.clone();
    let peers = crate::gateway_peers::start(&args, &scratch, &upstream_url).await?;
    let mut next = 0usize;
    let mut runs = Vec::new();
    for &rate in &rates {
        let mut targets: Vec<Target> = vec![
            (
                "direct (no gateway)",
                format!("{upstream_url}/chat/completions"),
                Vec::new(),
                None,
            ),
            (
                "stead",
                format!("{stead_base}/v1/chat/completions"),
                Vec::new(),
                Some(stead.child.id()),
            ),
        ];
        for peer in &peers {
            if rate <= peer.max_rate {
                targets.push((
                    peer.label,
                    peer.url.clone(),
                    peer.headers.clone(),
                    Some(peer.pid()),
                ));
            } else {
                println!(
                    "{} at {rate} req/s: skipped (above its --{}-max-rate {}; it saturates below)",
                    peer.label, peer.flag, peer.max_rate
                );
            }
        }
        for (label, url, headers, pid) in targets {
            print!("{label} at {rate} req/s: warm-up … ");
            use std::io::Write;
            let _ = std::io::stdout().flush();
            let warm = load(
                label,
                &url,
                &headers,
                "bench",
                rate,
                args.warmup,
                next,
                &holds,
            )
            .await?;
            next += warm.sent;
            let cpu_before = pid.map(process_cpu);
            let mut run = load(
                label,
                &url,
                &headers,
                "bench",
                rate,
                args.seconds,
                next,
                &holds,
            )
            .await?;
            next += run.sent;
            run.rss = pid.map(|p| process_memory(p).0);
            run.cpu_per_request = pid
                .zip(cpu_before)
                .map(|(p, before)| process_cpu(p).saturating_sub(before) / (run.ok.max(1) as u32));
            println!(
                "{} of {} answered; added p50 {:.3} ms p99 {:.3} ms",
                run.ok,
                run.sent,
                ms(&run.added, 0.5),
                ms(&run.added, 0.99)
            );
            runs.push(run);
        }
    }
    print_runs(&runs, &rates);
    // The request log was on: how many rows it wrote.
    let log = reqwest::get(format!("{stead_base}/metrics"))
        .await?
        .text()
        .await?;
    if let Some(line) = log
        .lines()
        .find(|l| l.starts_with("stead_gateway_log_records_total{fate=\"written\"}"))
    {
        println!("request log: {line}");
    }
    drop(stead);
    drop(peers);
    Ok(())
}

/// The runs as a Markdown table, and Stead's added p99 against LiteLLM's at each rate.
fn print_runs(runs: &[Run], rates: &[f64]) {
    println!();
    println!("| target | rate (req/s) | answered | total p50 / p99 (ms) | added p50 / p99 (ms) | client send lag p99 (ms) | gateway CPU per request (µs) | RSS (MiB) |");
    println!("|---|---|---|---|---|---|---|---|");
    for run in runs {
        println!(
            "| {} | {} | {} / {} | {:.2} / {:.2} | {:.3} / {:.3} | {:.2} | {} | {} |",
            run.label,
            run.rate,
            run.ok,
            run.sent,
            ms(&run.total, 0.5),
            ms(&run.total, 0.99),
            ms(&run.added, 0.5),
            ms(&run.added, 0.99),
            ms(&run.lag, 0.99),
            run.cpu_per_request
                .map_or("–".into(), |c| format!("{:.0}", c.as_secs_f64() * 1e6)),
            run.rss.map_or("–".into(), |b| format!(
                "{:.0}",
                b as f64 / (1 << 20) as f64
            )),
        );
    }
    for &rate in rates {
        let find = |label: &str| runs.iter().find(|r| r.label == label && r.rate == rate);
        let Some(stead) = find("stead") else {
            continue;
        };
        println!(
            "at {rate} req/s: stead's added p99 {:.3} ms; target ≤ 1 ms ({:.2}× the target)",
            ms(&stead.added, 0.99),
            ms(&stead.added, 0.99)
        );
        for peer in crate::gateway_peers::LABELS {
            if let Some(peer) = find(peer) {
                println!(
                    "at {rate} req/s: stead's added p99 is {:.1}× lower than {}'s ({:.3} ms)",
                    ms(&peer.added, 0.99) / ms(&stead.added, 0.99).max(0.001),
                    peer.label,
                    ms(&peer.added, 0.99)
                );
            }
        }
    }
}

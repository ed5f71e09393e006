//! `stead bench cluster` (docs/cluster.md, docs/benchmarks.md): two `stead serve` nodes on one
//! PostgreSQL, their model a double in this process. It measures what forwarding costs — a
//! session's requests sent to the node that holds it and the same requests through the other
//! node (latency at concurrency 1, throughput at `--concurrency`) — and how long a live node
//! takes to carry on a running turn after the owner is killed with SIGKILL.

use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::chaos::doubles;
use crate::cli::{BenchBackend, ClusterBenchArgs};
use crate::BenchDatabase;
use stead_config::prepare_data_dir;
use stead_config::Config;

const SECRET_ENV: &str = "BENCH_CLUSTER_SECRET";

struct Node {
    child: Child,
    base: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Node `name` on `port` in `dir` (which holds its `stead.toml` and the shared key).
async fn start(
    dir: &Path,
    port: u16,
    database: &str,
    http: &reqwest::Client,
) -> anyhow::Result<Node> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("serve.log"))?;
    let child = Command::new(std::env::current_exe()?)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
        ])
        .arg(dir.join("stead.toml"))
        .arg("--data-dir")
        .arg(dir)
        .args(["--database-url", database])
        .env_remove("DATABASE_URL")
        .env(SECRET_ENV, "the bench cluster's shared secret, 32+ bytes")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("cannot start `stead serve`")?;
    let node = Node {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let started = Instant::now();
    loop {
        let ready = http.get(format!("{}/readyz", node.base)).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return Ok(node);
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "a node did not start; see {}",
            dir.join("serve.log").display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Latency (p50, p99 in ms) of `requests` sequential calls, and throughput (requests/s) of
/// `requests` calls `concurrency` at a time.
async fn measure(
    http: &reqwest::Client,
    base: &str,
    session: &str,
    requests: usize,
    concurrency: usize,
) -> anyhow::Result<(f64, f64, f64)> {
    let url = format!("{base}/v1/sessions/{session}");
    let mut latencies = Vec::with_capacity(requests);
    for _ in 0..requests {
        let started = Instant::now();
        let answer = http.get(&url).send().await?;
        anyhow::ensure!(
            answer.status().is_success(),
            "GET {url}: {}",
            answer.status()
        );
        answer.bytes().await?;
        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    let started = Instant::now();
    let per_worker = requests.div_ceil(concurrency);
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                for _ in 0..per_worker {
                    let answer = http.get(&url).send().await?;
                    anyhow::ensure!(
                        answer.status().is_success(),
                        "GET {url}: {}",
                        answer.status()
                    );
                    answer.bytes().await?;
                }
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker.await??;
    }
    let rate = (per_worker * concurrency) as f64 / started.elapsed().as_secs_f64();
    Ok((at(0.5), at(0.99), rate))
}

pub async fn cluster(config: Config, args: ClusterBenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.requests > 0 && args.concurrency > 0,
        "--requests and --concurrency must be at least 1"
    );
    prepare_data_dir(&config.server.data_dir)?;
    let database = BenchDatabase::create(&config, BenchBackend::Postgres).await?;
    let url = database.url_text();
    let root = config
        .server
        .data_dir
        .join(format!("bench-cluster-{}", uuid::Uuid::new_v4().simple()));
    let result = run(&root, &url, &args).await;
    let _ = std::fs::remove_dir_all(&root);
    database.remove().await?;
    let report = result?;
    if args.json {
        println!("{report}");
    } else {
        println!(
            "forwarding: GET /v1/sessions/{{id}} to the owner p50 {:.2} ms p99 {:.2} ms, {:.0} req/s; \
             through the other node p50 {:.2} ms p99 {:.2} ms, {:.0} req/s",
            report["direct"]["p50_ms"].as_f64().unwrap_or_default(),
            report["direct"]["p99_ms"].as_f64().unwrap_or_default(),
            report["direct"]["per_s"].as_f64().unwrap_or_default(),
            report["forwarded"]["p50_ms"].as_f64().unwrap_or_default(),
            report["forwarded"]["p99_ms"].as_f64().unwrap_or_default(),
            report["forwarded"]["per_s"].as_f64().unwrap_or_default(),
        );
        println!(
            "takeover after SIGKILL of a running turn's node (lease TTL {} s, sweep {} s): {}",
            args.lease_ttl_secs, args.sweep_secs, report["takeover_ms"]
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn run(root: &Path, url: &str, args: &ClusterBenchArgs) -> anyhow::Result<Value> {
    let upstream = doubles::upstream().await?;
    let (webhook, _) = doubles::webhook().await?;
    let http = reqwest::Client::new();
    let key: Vec<u8> = (0..32).map(|_| rand::random::<u8>()).collect();
    let mut dirs = Vec::new();
    for name in ["a", "b"] {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir)?;
        let port = free_port()?;
        let config = format!(
            "{}\n[server]\nnode_id = \"node-{name}\"\n\n[sessions]\nlease_ttl_secs = {}\n\n\
             [cluster]\nadvertise_url = \"http://127.0.0.1:{port}\"\nsecret_env = \"{SECRET_ENV}\"\n\
             heartbeat_secs = 1\nnode_ttl_secs = 3\nsweep_secs = {}\n",
            doubles::config(&upstream, &webhook),
            args.lease_ttl_secs,
            args.sweep_secs
        );
        std::fs::write(dir.join("stead.toml"), config)?;
        let key_path = dir.join("session.key");
        std::fs::write(&key_path, &key)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))?;
        dirs.push((dir, port));
    }
    let mut a = start(&dirs[0].0, dirs[0].1, url, &http).await?;
    let b = start(&dirs[1].0, dirs[1].1, url, &http).await?;
    let session = activate(&http, &a.base).await?;
    // Warm both paths, then measure.
    measure(&http, &b.base, &session, 50, 1).await?;
    let direct = measure(&http, &a.base, &session, args.requests, args.concurrency).await?;
    let forwarded = measure(&http, &b.base, &session, args.requests, args.concurrency).await?;
    eprintln!("cluster: forwarding measured");

    let mut takeovers = Vec::new();
    for trial in 0..args.takeovers {
        // A session held by node a, mid-way through a long streamed answer.
        let session = activate(&http, &a.base).await?;
        let sent = http
            .post(format!("{}/v1/sessions/{session}/messages", a.base))
            .json(&json!({ "text": "a long answer please" }))
            .send()
            .await?;
        anyhow::ensure!(sent.status().as_u16() == 202, "message: {}", sent.status());
        tokio::time::sleep(Duration::from_millis(150)).await;
        let killed = Instant::now();
        drop(a);
        loop {
            let view: Value = http
                .get(format!("{}/v1/sessions/{session}", b.base))
                .send()
                .await?
                .json()
                .await
                .unwrap_or(Value::Null);
            if view["status"] == "idle" {
                break;
            }
            anyhow::ensure!(
                killed.elapsed() < Duration::from_secs(60),
                "trial {trial}: no takeover in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = killed.elapsed().as_millis() as u64;
        eprintln!("cluster: takeover {trial}: {took} ms");
        takeovers.push(took);
        a = start(&dirs[0].0, dirs[0].1, url, &http).await?;
    }
    takeovers.sort_unstable();
    Ok(json!({
        "requests": args.requests,
        "concurrency": args.concurrency,
        "direct": { "p50_ms": direct.0, "p99_ms": direct.1, "per_s": direct.2 },
        "forwarded": { "p50_ms": forwarded.0, "p99_ms": forwarded.1, "per_s": forwarded.2 },
        "lease_ttl_secs": args.lease_ttl_secs,
        "sweep_secs": args.sweep_secs,
        "takeover_ms": takeovers,
    }))
}

/// A new session whose first turn ran on (and so is held by) the node at `base`.
async fn activate(http: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    let created: Value = http
        .post(format!("{base}/v1/sessions"))
        .json(&json!({ "agent": "chaos" }))
        .send()
        .await?
        .json()
        .await?;
    let id = created["id"].as_str().context("a session id")?.to_string();
    let answered = http
        .post(format!("{base}/v1/sessions/{id}/messages?wait=true"))
        .json(&json!({ "text": "hello" }))
        .send()
        .await?;
    anyhow::ensure!(
        answered.status().is_success(),
        "first turn: {}",
        answered.status()
    );
    Ok(id)
}

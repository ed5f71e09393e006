//! The peer gateways `stead bench gateway` loads side by side with Stead, each started as its
//! own process on the same upstream double: LiteLLM's proxy (PyPI) and Portkey's open-source
//! AI Gateway (npm, `@portkey-ai/gateway`, run by Node).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::cli::GatewayBenchArgs;

/// The peers' labels, in the order their figures are compared.
pub(crate) const LABELS: [&str; 2] = ["LiteLLM", "Portkey"];

/// A peer gateway's process (stopped when dropped), where to send requests and with which
/// headers, and the highest rate it is loaded at.
pub(crate) struct Peer {
    pub label: &'static str,
    /// The option that sets `max_rate` (`--{flag}-max-rate`).
    pub flag: &'static str,
    child: std::process::Child,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub max_rate: f64,
}

impl Peer {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts every peer that is installed (or named by its option), unless `--no-peer`.
pub(crate) async fn start(
    args: &GatewayBenchArgs,
    dir: &Path,
    upstream: &str,
) -> anyhow::Result<Vec<Peer>> {
    let mut peers = Vec::new();
    if args.no_peer {
        return Ok(peers);
    }
    let installed = |given: &Option<PathBuf>, default: &str| {
        given.clone().or_else(|| {
            let candidate = PathBuf::from(default);
            candidate.is_file().then_some(candidate)
        })
    };
    match installed(&args.litellm, "target/litellm-venv/bin/litellm") {
        Some(binary) => {
            println!("starting LiteLLM ({}) …", binary.display());
            peers.push(litellm(&binary, dir, upstream, args.litellm_max_rate).await?);
        }
        None => println!(
            "LiteLLM: not run (pass --litellm PATH, or install it into target/litellm-venv)"
        ),
    }
    match installed(&args.portkey, PORTKEY_SCRIPT) {
        Some(script) => {
            println!("starting Portkey's AI Gateway ({}) …", script.display());
            peers.push(portkey(&script, dir, upstream, args.portkey_max_rate).await?);
        }
        None => println!(
            "Portkey: not run (pass --portkey PATH to build/start-server.js, or `npm install \
             --prefix target/portkey-gateway @portkey-ai/gateway`)"
        ),
    }
    Ok(peers)
}

/// Where `npm install --prefix target/portkey-gateway @portkey-ai/gateway` puts its server.
const PORTKEY_SCRIPT: &str =
    "target/portkey-gateway/node_modules/@portkey-ai/gateway/build/start-server.js";

fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Polls `url` until it answers (any status) or `what` has had 120 s.
async fn ready(
    url: &str,
    what: &str,
    log: &Path,
    healthy: fn(reqwest::StatusCode) -> bool,
) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let started = Instant::now();
    loop {
        if let Ok(r) = client.get(url).send().await {
            if healthy(r.status()) {
                println!("{what} ready in {:.1} s", started.elapsed().as_secs_f64());
                return Ok(());
            }
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "{what} did not become ready in 120 s (see {})",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Portkey's gateway (Hono on Node) on a free port, told per request to send to the upstream
/// double as an OpenAI-compatible custom host. Its open-source build keeps no request log.
async fn portkey(script: &Path, dir: &Path, upstream: &str, max_rate: f64) -> anyhow::Result<Peer> {
    let port = free_port()?;
    let log_path = dir.join("portkey.log");
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new(std::env::var_os("NODE").unwrap_or_else(|| "node".into()))
        .arg(script)
        .arg(format!("--port={port}"))
        .arg("--headless")
        .env("NODE_ENV", "production")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start Portkey's gateway ({})", script.display()))?;
    let base = format!("http://127.0.0.1:{port}");
    let peer = Peer {
        label: "Portkey",
        flag: "portkey",
        child,
        url: format!("{base}/v1/chat/completions"),
        headers: vec![
            ("x-portkey-provider".into(), "openai".into()),
            ("x-portkey-custom-host".into(), upstream.to_string()),
            (
                "authorization".into(),
                "Bearer sk-upstream-double-not-checked".into(),
            ),
        ],
        max_rate,
    };
    ready(&base, "Portkey's gateway", &log_path, |_| true).await?;
    Ok(peer)
}

const LITELLM_KEY: &str = "sk-bench-0123456789abcdef0123456789abcdef";

/// LiteLLM's proxy, one worker, on a free port.
async fn litellm(binary: &Path, dir: &Path, upstream: &str, max_rate: f64) -> anyhow::Result<Peer> {
    let config = format!(
        "model_list:\n  - model_name: bench\n    litellm_params:\n      model: openai/bench\n      \
         api_base: {upstream}\n      api_key: sk-upstream-double-not-checked\n\
         litellm_settings:\n  drop_params: true\n  set_verbose: false\n  request_timeout: 600\n  \
         num_retries: 0\n\
         general_settings:\n  master_key: os.environ/LITELLM_MASTER_KEY\n  \
         disable_spend_logs: true\n  disable_error_logs: true\n  background_health_checks: false\n"
    );
    let path = dir.join("litellm.yaml");
    std::fs::write(&path, config)?;
    let port = free_port()?;
    let log = std::fs::File::create(dir.join("litellm.log"))?;
    let child = Command::new(binary)
        .arg("--config")
        .arg(&path)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--num_workers",
            "1",
        ])
        .env("LITELLM_MASTER_KEY", LITELLM_KEY)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("LITELLM_TELEMETRY_DISABLED", "true")
        .env("LITELLM_LOG", "ERROR")
        .env("NO_PROXY", "*")
        .env_remove("DATABASE_URL")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start LiteLLM ({})", binary.display()))?;
    let base = format!("http://127.0.0.1:{port}");
    let peer = Peer {
        label: "LiteLLM",
        flag: "litellm",
        child,
        url: format!("{base}/v1/chat/completions"),
        headers: vec![("authorization".into(), format!("Bearer {LITELLM_KEY}"))],
        max_rate,
    };
    ready(
        &format!("{base}/health/liveliness"),
        "LiteLLM",
        &dir.join("litellm.log"),
        |status| status.is_success(),
    )
    .await?;
    Ok(peer)
}

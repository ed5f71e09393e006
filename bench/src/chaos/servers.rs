//! The servers a chaos run faults: one `stead serve`, or with `--nodes N` a cluster of N nodes
//! on one PostgreSQL (docs/cluster.md) sharing a session key and a cluster secret, whose
//! clients pick a node per request. Each node keeps its port, data directory and node id
//! across restarts; its stderr goes to `serve.log` in its directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::Rng;
use serde_json::Value;

const SECRET_ENV: &str = "BENCH_CHAOS_CLUSTER_SECRET";
/// The cluster's lease TTL (s): a dead node's running sessions move within it plus a sweep.
pub const CLUSTER_LEASE_TTL_SECS: u64 = 2;

struct Node {
    dir: PathBuf,
    port: u16,
    child: Child,
}

pub struct Servers {
    database: String,
    nodes: Vec<Node>,
    http: reqwest::Client,
}

impl Drop for Servers {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.child.kill();
            let _ = node.child.wait();
        }
    }
}

/// `/readyz`'s status at `base`; `None` when nothing answered. The wait is longer than the
/// server's own readiness timeout (2 s), so that its 503 is heard.
pub async fn readyz(http: &reqwest::Client, base: &str) -> Option<reqwest::StatusCode> {
    let answer = http
        .get(format!("{base}/readyz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    answer.ok().map(|r| r.status())
}

/// `stead serve` on `port` with the `stead.toml` of `dir`.
fn spawn(dir: &Path, port: u16, database: &str) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("serve.log"))?;
    Command::new(std::env::current_exe()?)
        .arg("serve")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--config")
        .arg(dir.join("stead.toml"))
        .arg("--data-dir")
        .arg(dir)
        .args(["--database-url", database])
        .env_remove("DATABASE_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env(SECRET_ENV, "the chaos cluster's shared secret, 32+ bytes")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("cannot start `stead serve`")
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Servers {
    /// Starts `count` servers with `config` (one: in `dir` itself; more: a cluster, node `i`
    /// in `dir/node-i`) and waits until each is ready.
    pub async fn start(
        dir: &Path,
        database: &str,
        config: &str,
        count: usize,
    ) -> anyhow::Result<Servers> {
        let mut servers = Servers {
            database: database.to_string(),
            nodes: Vec::new(),
            http: reqwest::Client::new(),
        };
        let key: Vec<u8> = (0..32).map(|_| rand::random::<u8>()).collect();
        for i in 0..count {
            let port = free_port()?;
            let (node_dir, text) = if count == 1 {
                (dir.to_path_buf(), config.to_string())
            } else {
                let node_dir = dir.join(format!("node-{i}"));
                std::fs::create_dir_all(&node_dir)?;
                // Every node checks the others' session tokens: one key for all.
                let key_path = node_dir.join("session.key");
                std::fs::write(&key_path, &key)?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))?;
                let text = format!(
                    "{config}\n[server]\nnode_id = \"node-{i}\"\n\n[sessions]\n\
                     lease_ttl_secs = {CLUSTER_LEASE_TTL_SECS}\n\n[cluster]\n\
                     advertise_url = \"http://127.0.0.1:{port}\"\nsecret_env = \"{SECRET_ENV}\"\n\
                     heartbeat_secs = 1\nnode_ttl_secs = 3\nsweep_secs = 1\n"
                );
                (node_dir, text)
            };
            std::fs::write(node_dir.join("stead.toml"), text)?;
            let child = spawn(&node_dir, port, database)?;
            servers.nodes.push(Node {
                dir: node_dir,
                port,
                child,
            });
        }
        for i in 0..count {
            servers.ready(i).await?;
        }
        Ok(servers)
    }

    /// Every node's `http://127.0.0.1:PORT`.
    pub fn bases(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("http://127.0.0.1:{}", n.port))
            .collect()
    }

    /// The process of the first node (the only one without a cluster).
    pub fn first(&self) -> &Child {
        &self.nodes[0].child
    }

    /// Where the servers' logs are.
    pub fn log(&self, i: usize) -> PathBuf {
        self.nodes[i].dir.join("serve.log")
    }

    /// Fails when node `i` exited.
    pub fn running(&mut self, i: usize) -> anyhow::Result<()> {
        if let Some(status) = self.nodes[i].child.try_wait()? {
            anyhow::bail!(
                "`stead serve` exited ({status}); see {}",
                self.log(i).display()
            );
        }
        Ok(())
    }

    /// Waits until node `i` answers `/readyz` with 200; fails when it exits first.
    pub async fn ready(&mut self, i: usize) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let base = format!("http://127.0.0.1:{}", self.nodes[i].port);
        loop {
            self.running(i)
                .context("`stead serve` stopped before it was ready")?;
            if readyz(&self.http, &base)
                .await
                .is_some_and(|status| status.is_success())
            {
                return Ok(started.elapsed());
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(60),
                "the server was not ready 60 s after its start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL to node `i`.
    pub fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        let node = &mut self.nodes[i];
        node.child.kill().context("SIGKILL")?;
        node.child.wait()?;
        Ok(())
    }

    /// Starts node `i` again (on its port, directory and database) and waits until it is
    /// ready.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<Duration> {
        let node = &mut self.nodes[i];
        node.child = spawn(&node.dir, node.port, &self.database)?;
        self.ready(i).await
    }

    /// The node to kill: the one holding the most sessions' leases (as a live node's
    /// `GET /v1/cluster` says; ties and an unanswered question: at random).
    pub async fn victim(&self, rng: &mut impl Rng) -> usize {
        let count = self.nodes.len();
        let fallback = rng.random_range(0..count);
        if count == 1 {
            return 0;
        }
        let base = format!("http://127.0.0.1:{}", self.nodes[fallback].port);
        let view: Value = match self.http.get(format!("{base}/v1/cluster")).send().await {
            Ok(answer) => answer.json().await.unwrap_or(Value::Null),
            Err(_) => return fallback,
        };
        let mut busiest = (fallback, -1i64);
        for node in view["nodes"].as_array().into_iter().flatten() {
            let held = node["sessions"].as_i64().unwrap_or(0);
            let index = node["node_id"]
                .as_str()
                .and_then(|id| id.strip_prefix("node-"))
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| n < count);
            if let Some(index) = index {
                if held > busiest.1 {
                    busiest = (index, held);
                }
            }
        }
        busiest.0
    }
}

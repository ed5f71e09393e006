//! MCP servers as sources of agent tools (docs/mcp.md). Stead is a client of each configured
//! `[[mcp_servers]]` entry over the official Rust SDK (`rmcp`): a child process over stdio or
//! Streamable HTTP. The servers start with `stead serve` (in the background: a server that is
//! slow or broken does not hold up the start; its tools appear once it has listed them), are
//! kept running by a supervisor that restarts them with backoff, and stop on shutdown.
//!
//! - [`server`]: one server's connection, tool list, calls (timeout, idempotency key in
//!   `_meta`, progress, cancellation), status and counters;
//! - [`tools`]: the names the model sees (`{server}__{tool}`) and an agent's MCP tools as the
//!   dynamic tool source its sessions journal (`tools_seen`) and call;
//! - [`result`]: tool results as JSON, `isError` as the tool's error, oversized results cut;
//! - [`endpoint`]: Stead as an MCP server at `/mcp`, so other agents and MCP clients can
//!   drive Stead agents.

pub mod endpoint;
mod progress;
pub mod result;
pub mod server;
mod stderr;
pub mod tools;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

pub use server::{McpServer, ServerConfig, ServerTool, Status, Transport, IDEMPOTENCY_META_KEY};
pub use tools::{AgentMcp, McpTool};

use stead_config::McpServerConfig;
use stead_http::views::McpServerList;

/// Every configured MCP server.
pub struct McpRegistry {
    servers: Vec<Arc<McpServer>>,
    /// Bumped whenever a server's tool list changes.
    generation: Arc<AtomicU64>,
}

impl McpRegistry {
    /// The servers of the configuration, not started. Header values named by `headers_env`
    /// are read here: a missing variable stops the start, naming it (never a value).
    pub fn new(configs: &[McpServerConfig]) -> anyhow::Result<Arc<Self>> {
        let generation = Arc::new(AtomicU64::new(0));
        let servers = configs
            .iter()
            .map(|config| {
                let server = server_config(config)
                    .with_context(|| format!("mcp_servers `{}`", config.name))?;
                Ok(McpServer::new(server, generation.clone()))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Arc::new(McpRegistry {
            servers,
            generation,
        }))
    }

    /// Keeps the files the servers' tools return in `artifacts` (docs/artifacts.md).
    pub fn keep_files_in(&self, artifacts: &Arc<crate::tool_artifacts::ToolArtifacts>) {
        for server in &self.servers {
            server.keep_files_in(artifacts.clone());
        }
    }

    /// Starts every server under its supervisor, in the background.
    pub fn start(&self) {
        for server in &self.servers {
            tokio::spawn(server.clone().supervise());
        }
    }

    /// Stops every server (children are killed if they do not exit).
    pub async fn shutdown(&self) {
        futures_util::future::join_all(self.servers.iter().map(|s| s.stop())).await;
    }

    pub fn server(&self, name: &str) -> Option<&Arc<McpServer>> {
        self.servers.iter().find(|s| s.name() == name)
    }

    pub fn servers(&self) -> &[Arc<McpServer>] {
        &self.servers
    }

    pub fn generation(&self) -> Arc<AtomicU64> {
        self.generation.clone()
    }

    /// Waits until every server is ready or `timeout` passes (tests, and `stead serve` never).
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.servers.iter().all(|s| s.status() == Status::Ready) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET /v1/mcp/servers`.
    pub fn report(&self) -> McpServerList {
        McpServerList {
            servers: self.servers.iter().map(|s| s.report()).collect(),
        }
    }

    /// The per-server series of `/metrics` (Prometheus text).
    pub fn metrics(&self) -> String {
        let mut out = String::new();
        let series: [(&str, &str, &str); 4] = [
            ("stead_mcp_calls_total", "counter", "MCP tool calls"),
            (
                "stead_mcp_call_errors_total",
                "counter",
                "MCP tool calls that failed",
            ),
            (
                "stead_mcp_call_seconds_sum",
                "counter",
                "Time spent in MCP tool calls",
            ),
            ("stead_mcp_restarts_total", "counter", "MCP server restarts"),
        ];
        for (name, kind, help) in series {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for server in &self.servers {
                let c = &server.counters;
                let value = match name {
                    "stead_mcp_calls_total" => c.calls.load(Ordering::Relaxed) as f64,
                    "stead_mcp_call_errors_total" => c.errors.load(Ordering::Relaxed) as f64,
                    "stead_mcp_call_seconds_sum" => {
                        c.latency_us.load(Ordering::Relaxed) as f64 / 1e6
                    }
                    _ => c.restarts.load(Ordering::Relaxed) as f64,
                };
                out.push_str(&format!("{name}{{server=\"{}\"}} {value}\n", server.name()));
            }
        }
        out.push_str("# HELP stead_mcp_server_up Whether the MCP server is ready (1) or not (0)\n# TYPE stead_mcp_server_up gauge\n");
        for server in &self.servers {
            let up = u8::from(server.status() == Status::Ready);
            out.push_str(&format!(
                "stead_mcp_server_up{{server=\"{}\"}} {up}\n",
                server.name()
            ));
        }
        out
    }
}

impl stead_http::McpView for McpRegistry {
    fn report(&self) -> McpServerList {
        McpRegistry::report(self)
    }
    fn metrics(&self) -> String {
        McpRegistry::metrics(self)
    }
}

fn server_config(config: &McpServerConfig) -> anyhow::Result<ServerConfig> {
    let transport = match (&config.command, &config.url) {
        (Some(command), _) => Transport::Stdio {
            command: command.clone(),
            args: config.args.clone(),
            env: config.env.clone(),
        },
        (None, Some(url)) => Transport::Http {
            url: url.clone(),
            headers: crate::agent::headers(&config.headers, &config.headers_env)?,
        },
        (None, None) => anyhow::bail!("give `command` or `url`"),
    };
    Ok(ServerConfig {
        name: config.name.clone(),
        transport,
        start_timeout: Duration::from_secs(config.start_timeout_secs),
        call_timeout: Duration::from_secs(config.call_timeout_secs),
    })
}

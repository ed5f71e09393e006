//! One MCP server Stead is a client of: its connection (a child process over stdio, or
//! Streamable HTTP), kept alive by a supervisor that restarts it with backoff; its tool list
//! (refetched on `notifications/tools/list_changed`); tool calls with a timeout, the idempotency
//! key in `_meta`, progress routed to the calling session and cancellation sent as
//! `notifications/cancelled`; and its status and metrics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientRequest, JsonObject, Request,
    RequestMetaObject, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde::Serialize;
use serde_json::{json, Value};
use stead_actors::tools::{ToolContext, ToolError};
use stead_http::views::{McpServerView, McpToolView, RejectedTool};
use tokio_util::sync::CancellationToken;

use super::progress::{lock, Handler, ProgressRoute, Shared};
use super::result::tool_result;
use crate::tool_artifacts::ToolArtifacts;

/// The `_meta` key that carries a call's idempotency key (MCP has none of its own).
pub const IDEMPOTENCY_META_KEY: &str = "io.stead/idempotencyKey";

/// The first wait before a server that failed to start or exited soon after is started again;
/// it doubles up to [`RESTART_MAX_WAIT`]. A server that ran for [`HEALTHY_RUN`] is started
/// again at once.
const RESTART_FIRST_WAIT: Duration = Duration::from_secs(1);
const RESTART_MAX_WAIT: Duration = Duration::from_secs(60);
const HEALTHY_RUN: Duration = Duration::from_secs(5);

/// What a stdio MCP server inherits of Stead's environment (docs/mcp.md): where to find
/// programs, the user's home and locale, the temporary directory and time zone — nothing that
/// could be a secret. Everything else it needs comes from its entry's `env`.
pub const INHERITED_ENV: [&str; 8] = [
    "PATH", "HOME", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ",
];

/// How a server is reached.
#[derive(Debug, Clone)]
pub enum Transport {
    /// A child process Stead starts, speaking JSON-RPC over its stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP at `url`, with these headers on every request.
    Http {
        url: String,
        headers: reqwest::header::HeaderMap,
    },
}

/// One configured server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
    /// How long a start (spawn or connect, and `initialize`) and `tools/list` may take.
    pub start_timeout: Duration,
    /// How long one `tools/call` may take.
    pub call_timeout: Duration,
}

/// A tool the server offers, as `tools/list` described it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// Where a server stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Not started yet, or starting.
    Starting,
    /// Initialized, its tools listed.
    Ready,
    /// It failed to start or exited; the supervisor starts it again after a backoff.
    Restarting,
    /// Stead is shutting down.
    Stopped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Starting => "starting",
            Status::Ready => "ready",
            Status::Restarting => "restarting",
            Status::Stopped => "stopped",
        }
    }
}

#[derive(Debug)]
struct Info {
    status: Status,
    tools: Arc<Vec<ServerTool>>,
    rejected: Vec<RejectedTool>,
    last_error: Option<String>,
}

/// Per-server counters for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    pub restarts: AtomicU64,
    /// Sum of call latencies, microseconds.
    pub latency_us: AtomicU64,
}

type Client = RunningService<RoleClient, Handler>;

/// One MCP server: its connection, started again when it is gone.
pub struct McpServer {
    config: ServerConfig,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    info: SyncMutex<Info>,
    shared: Arc<Shared>,
    pub counters: Counters,
    /// Bumped whenever the tool list changes (agents' lists are rebuilt from it).
    generation: Arc<AtomicU64>,
    stopping: CancellationToken,
    /// Where the files in its results are kept (unset: only their size is).
    artifacts: OnceLock<Arc<ToolArtifacts>>,
}

impl McpServer {
    /// A server not started yet; `generation` is bumped on every change of its tool list.
    pub fn new(config: ServerConfig, generation: Arc<AtomicU64>) -> Arc<Self> {
        Arc::new(McpServer {
            config,
            client: tokio::sync::Mutex::new(None),
            info: SyncMutex::new(Info {
                status: Status::Starting,
                tools: Arc::new(Vec::new()),
                rejected: Vec::new(),
                last_error: None,
            }),
            shared: Arc::default(),
            counters: Counters::default(),
            generation,
            stopping: CancellationToken::new(),
            artifacts: OnceLock::new(),
        })
    }

    /// Keeps the files its tools return (images, audio, binary resources) in `artifacts`;
    /// set once, before the first call.
    pub fn keep_files_in(&self, artifacts: Arc<ToolArtifacts>) {
        let _ = self.artifacts.set(artifacts);
    }

    /// Starts the server and lists its tools (one try, no supervisor): for tests and tools.
    pub async fn connect(config: ServerConfig) -> anyhow::Result<Arc<Self>> {
        let server = McpServer::new(config, Arc::default());
        server.client().await.map_err(|e| anyhow::anyhow!(e.0))?;
        server
            .refresh_tools()
            .await
            .map_err(|e| anyhow::anyhow!(e.0))?;
        Ok(server)
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The tools listed last (kept while the server is down; empty before its first listing).
    pub fn tools(&self) -> Arc<Vec<ServerTool>> {
        lock(&self.info).tools.clone()
    }

    pub fn status(&self) -> Status {
        lock(&self.info).status
    }

    pub fn report(&self) -> McpServerView {
        let info = lock(&self.info);
        McpServerView {
            name: self.config.name.clone(),
            transport: match self.config.transport {
                Transport::Stdio { .. } => "stdio",
                Transport::Http { .. } => "http",
            }
            .to_string(),
            status: info.status.as_str().to_string(),
            tools: info
                .tools
                .iter()
                .map(|t| McpToolView {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    input_schema: t.input_schema.clone(),
                })
                .collect(),
            rejected_tools: info.rejected.clone(),
            last_error: info.last_error.clone(),
            restarts: self.counters.restarts.load(Ordering::Relaxed),
            calls: self.counters.calls.load(Ordering::Relaxed),
            errors: self.counters.errors.load(Ordering::Relaxed),
        }
    }

    fn set(&self, status: Status, error: Option<String>) {
        let mut info = lock(&self.info);
        info.status = status;
        if let Some(error) = error {
            let error = stead_config::redact::redact_urls(&error);
            tracing::warn!(server = %self.config.name, %error, "MCP server");
            info.last_error = Some(error);
        }
        // A server that is down keeps its last tool list: its calls fail clearly (or start it
        // again) until it is back, instead of the tools vanishing from every session's list.
    }

    /// Keeps the server running until [`McpServer::stop`]: starts it, lists its tools, relists
    /// them when it says they changed, and starts it again when it fails or exits — at once
    /// after a run of [`HEALTHY_RUN`] or more, else after a backoff of 1 s doubling to 60 s.
    pub async fn supervise(self: Arc<Self>) {
        let mut wait = RESTART_FIRST_WAIT;
        loop {
            let started = Instant::now();
            match self.client().await {
                Ok(client) => {
                    self.watch(&client).await;
                    if self.stopping.is_cancelled() {
                        break;
                    }
                    // A call may have started it again already.
                    let replaced = self
                        .client
                        .lock()
                        .await
                        .as_ref()
                        .is_some_and(|live| !Arc::ptr_eq(live, &client));
                    if replaced {
                        continue;
                    }
                    self.set(
                        Status::Restarting,
                        Some("the server closed the connection (did it exit?)".into()),
                    );
                }
                Err(error) => self.set(Status::Restarting, Some(error.0)),
            }
            if started.elapsed() >= HEALTHY_RUN {
                wait = RESTART_FIRST_WAIT;
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.stopping.cancelled() => break,
            }
            wait = (wait * 2).min(RESTART_MAX_WAIT);
        }
        self.set(Status::Stopped, None);
    }

    /// Waits while the connection lives, relisting the tools when the server says they changed.
    async fn watch(&self, client: &Arc<Client>) {
        let mut poll = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                _ = poll.tick() => {
                    if client.peer().is_transport_closed() {
                        return;
                    }
                }
                () = self.shared.list_changed.notified() => {
                    if let Err(error) = self.refresh_tools().await {
                        tracing::warn!(server = %self.config.name, error = %error.0, "relisting tools failed");
                    }
                }
                () = self.stopping.cancelled() => return,
            }
        }
    }

    /// Stops the supervisor and the server (a child process is killed if it does not exit when
    /// its stdin closes).
    pub async fn stop(&self) {
        self.stopping.cancel();
        let client = self.client.lock().await.take();
        if let Some(client) = client {
            if let Ok(mut client) = Arc::try_unwrap(client) {
                let _ = client.close_with_timeout(Duration::from_secs(3)).await;
            }
        }
    }

    /// The live connection, or a new one when there is none or it closed: started, initialized
    /// and its tools listed (the server is `ready` then). A call whose server died starts it
    /// again here at once, so one crash costs one call.
    async fn client(&self) -> Result<Arc<Client>, ToolError> {
        let mut slot = self.client.lock().await;
        let restart = match slot.as_ref() {
            Some(client) if !client.peer().is_transport_closed() => return Ok(client.clone()),
            Some(_) => true,
            None => false,
        };
        if self.stopping.is_cancelled() {
            return Err(ToolError(format!(
                "the MCP server `{}` is stopped",
                self.config.name
            )));
        }
        if restart {
            self.counters.restarts.fetch_add(1, Ordering::Relaxed);
            tracing::info!(server = %self.config.name, "starting the MCP server again");
        }
        self.set(Status::Starting, None);
        let client = Arc::new(self.start().await?);
        self.list_tools(&client).await?;
        *slot = Some(client.clone());
        self.set(Status::Ready, None);
        Ok(client)
    }

    async fn start(&self) -> Result<Client, ToolError> {
        let name = &self.config.name;
        let timeout = self.config.start_timeout;
        let handler = Handler {
            shared: self.shared.clone(),
        };
        let serving = match &self.config.transport {
            Transport::Stdio { command, args, env } => {
                let mut process = tokio::process::Command::new(command);
                // A clean environment: Stead's holds provider keys, webhook secrets and the
                // cluster secret. The child gets only these variables of Stead's, and the
                // entry's `env`.
                process.env_clear();
                for name in INHERITED_ENV {
                    if let Some(value) = std::env::var_os(name) {
                        process.env(name, value);
                    }
                }
                process.args(args).envs(env);
                // The server dies with Stead, even when Stead is killed (SIGKILL runs no
                // destructor that could stop it).
                #[cfg(target_os = "linux")]
                // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
                unsafe {
                    process.pre_exec(|| {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                        Ok(())
                    });
                }
                let (transport, stderr) = TokioChildProcess::builder(process)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| {
                        ToolError(format!(
                            "cannot start the MCP server `{name}` (`{command}`): {e}"
                        ))
                    })?;
                if let Some(stderr) = stderr {
                    tokio::spawn(super::stderr::log_stderr(name.clone(), stderr));
                }
                tokio::time::timeout(timeout, handler.serve(transport)).await
            }
            Transport::Http { url, headers } => {
                let headers = headers
                    .iter()
                    .filter_map(|(k, v)| {
                        Some((
                            rmcp_http::HeaderName::from_bytes(k.as_str().as_bytes()).ok()?,
                            rmcp_http::HeaderValue::from_bytes(v.as_bytes()).ok()?,
                        ))
                    })
                    .collect();
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers);
                let transport = StreamableHttpClientTransport::from_config(config);
                tokio::time::timeout(timeout, handler.serve(transport)).await
            }
        };
        let client = serving
            .map_err(|_| {
                ToolError(format!(
                    "the MCP server `{name}` did not initialize within {timeout:?}"
                ))
            })?
            .map_err(|e| ToolError(format!("the MCP server `{name}` failed to initialize: {e}")))?;
        // A dead server must not answer from rmcp's response cache.
        client
            .set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
            .await;
        Ok(client)
    }

    /// Lists the server's tools again (starting it when it is down).
    pub async fn refresh_tools(&self) -> Result<Arc<Vec<ServerTool>>, ToolError> {
        let client = self.client().await?;
        self.list_tools(&client).await
    }

    /// Lists every page of the server's tools; tools whose input schema does not compile are
    /// left out (and named in the report).
    async fn list_tools(&self, client: &Client) -> Result<Arc<Vec<ServerTool>>, ToolError> {
        let name = &self.config.name;
        let timeout = self.config.start_timeout;
        let listed = tokio::time::timeout(timeout, client.list_all_tools())
            .await
            .map_err(|_| {
                ToolError(format!(
                    "the MCP server `{name}` did not list its tools within {timeout:?}"
                ))
            })?
            .map_err(|e| {
                ToolError(format!(
                    "the MCP server `{name}` failed to list its tools: {e}"
                ))
            })?;
        let mut tools = Vec::new();
        let mut rejected = Vec::new();
        for tool in listed {
            let input_schema = Value::Object((*tool.input_schema).clone());
            if let Err(why) = stead_actors::ArgumentSchema::compile(&input_schema) {
                rejected.push(RejectedTool {
                    name: tool.name.to_string(),
                    error: why.to_string(),
                });
                continue;
            }
            tools.push(ServerTool {
                name: tool.name.to_string(),
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema,
            });
        }
        let tools = Arc::new(tools);
        let mut info = lock(&self.info);
        if !rejected.is_empty() {
            let error = format!(
                "left out {} tool(s) whose input schema is invalid: {}",
                rejected.len(),
                rejected
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            tracing::warn!(server = %name, %error, "MCP server");
            info.last_error = Some(error);
        }
        if *info.tools != *tools {
            info.tools = tools.clone();
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        info.rejected = rejected;
        Ok(tools)
    }

    /// Calls `tool` with `arguments` (a JSON object), the call's idempotency key in `_meta`,
    /// its progress to `context.progress`; `context.cancel` sends `notifications/cancelled`.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        context: &ToolContext,
    ) -> Result<Value, ToolError> {
        let started = Instant::now();
        tracing::Span::current().record("stead.tool.server", self.config.name.as_str());
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        // The error reaches `tool_call_failed`, the model and its provider: no URL in it may
        // carry the server's credentials (an HTTP server's `…/mcp?api_key=…`).
        let result = self
            .call_inner(tool, arguments, context)
            .await
            .map_err(|e| ToolError(stead_config::redact::redact_urls(&e.0)));
        self.counters
            .latency_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        if result.is_err() {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    async fn call_inner(
        &self,
        tool: &str,
        arguments: Value,
        context: &ToolContext,
    ) -> Result<Value, ToolError> {
        let name = &self.config.name;
        let timeout = self.config.call_timeout;
        let Value::Object(arguments) = arguments else {
            return Err(ToolError("the arguments must be a JSON object".into()));
        };
        let client = self.client().await?;
        let mut meta = JsonObject::new();
        meta.insert(IDEMPOTENCY_META_KEY.into(), json!(context.idempotency_key));
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let options = PeerRequestOptions::with_timeout(timeout)
            .with_meta(RequestMetaObject(rmcp::model::MetaObject(meta)));
        let request = ClientRequest::CallToolRequest(Request::new(params));
        let handle = client
            .send_cancellable_request(request, options)
            .await
            .map_err(|e| {
                ToolError(format!(
                    "cannot send the call to the MCP server `{name}`: {e}"
                ))
            })?;
        let token = handle.progress_token.clone();
        let (request_id, peer) = (handle.id.clone(), handle.peer.clone());
        let _route = ProgressRoute::new(&self.shared, token, context.progress.clone());
        let response = tokio::select! {
            response = handle.await_response() => response,
            () = context.cancel.cancelled() => {
                let notice = CancelledNotificationParam::new(
                    Some(request_id),
                    Some("cancelled in Stead".into()),
                );
                let _ = peer.notify_cancelled(notice).await;
                return Err(ToolError(format!("cancelled; `notifications/cancelled` was sent to `{name}`")));
            }
        };
        let response = response.map_err(|e| match e {
            rmcp::ServiceError::TransportClosed => ToolError(format!(
                "the MCP server `{name}` closed the connection during the call (did it exit?)"
            )),
            rmcp::ServiceError::Timeout { .. } => ToolError(format!(
                "the MCP server `{name}` did not answer within {timeout:?} (the call was cancelled)"
            )),
            rmcp::ServiceError::McpError(error) => ToolError(format!(
                "the MCP server `{name}` refused the call: {}",
                error.message
            )),
            other => ToolError(format!("the MCP server `{name}` failed the call: {other}")),
        })?;
        let ServerResult::CallToolResult(result) = response else {
            return Err(ToolError(format!(
                "the MCP server `{name}` answered the call with something else than a tool result"
            )));
        };
        let result = serde_json::to_value(&result)
            .map_err(|e| ToolError(format!("cannot read the MCP server `{name}`'s result: {e}")))?;
        tool_result(result, self.artifacts.get().map(Arc::as_ref), context).await
    }
}

/// The `http` crate as rmcp's transport names it.
mod rmcp_http {
    pub use reqwest::header::{HeaderName, HeaderValue};
}

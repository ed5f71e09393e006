//! Configuration: built-in defaults → `stead.toml` (`--config` / `STEAD_CONFIG`) → `STEAD_*`
//! environment variables → command-line flags, merged by figment and validated once at start.
//!
//! Environment: `STEAD_LISTEN`, `STEAD_DATA_DIR` and `DATABASE_URL` set `server.listen`,
//! `server.data_dir` and `database.url`; any other key is `STEAD_<SECTION>__<KEY>` (double
//! underscore between levels), e.g. `STEAD_DATABASE__MAX_EVENT_BYTES=2097152`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use stead_inference::router::config::{GatewayConfig, RouteConfig, TargetConfig};
use stead_persistence::DatabaseUrl;

/// Variables with a fixed meaning that the generic `STEAD_*` mapping must not see.
const RESERVED_ENV: [&str; 3] = ["CONFIG", "LISTEN", "DATA_DIR"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub log: LogConfig,
    pub sessions: SessionsConfig,
    pub providers: Vec<ProviderConfig>,
    pub routes: Vec<RouteConfig>,
    pub agents: Vec<AgentConfig>,
    /// The model router's cache, cooldown, limits, prices and request log (`[gateway]`).
    pub gateway: GatewayConfig,
}

/// How session actors snapshot, sleep and restart (`[sessions]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// Write a snapshot of a session's folded state every this many events.
    pub snapshot_every: i64,
    /// Passivate an actor idle this long with no clients attached.
    pub passivate_after_secs: u64,
    /// A session whose actor fails this many times within `restart_window_secs` is failed.
    pub restart_limit: u32,
    pub restart_window_secs: u64,
    /// First restart delay, doubled per failure up to `restart_backoff_max_ms`.
    pub restart_backoff_ms: u64,
    pub restart_backoff_max_ms: u64,
    /// An activation's lease on its session (SPEC §2.1), renewed every third of it.
    pub lease_ttl_secs: u64,
    /// Journal retention: keep an ended (closed or failed) session's full journal this many
    /// days after its last change, then compact it to a snapshot plus a summary. Unset: keep
    /// every journal whole. Open and parked sessions are never compacted.
    pub keep_journal_days: Option<u64>,
    /// How often the server looks for journals to compact (with `keep_journal_days` set).
    pub retention_sweep_secs: u64,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        let lifecycle = stead_actors::session::Lifecycle::default();
        SessionsConfig {
            snapshot_every: lifecycle.snapshot_every,
            passivate_after_secs: lifecycle.passivate_after.as_secs(),
            restart_limit: lifecycle.restart_limit,
            restart_window_secs: lifecycle.restart_window.as_secs(),
            restart_backoff_ms: lifecycle.restart_backoff.as_millis() as u64,
            restart_backoff_max_ms: lifecycle.restart_backoff_max.as_millis() as u64,
            lease_ttl_secs: lifecycle.lease_ttl.as_secs(),
            keep_journal_days: None,
            retention_sweep_secs: 3600,
        }
    }
}

impl SessionsConfig {
    pub fn lifecycle(&self) -> stead_actors::session::Lifecycle {
        use std::time::Duration;
        stead_actors::session::Lifecycle {
            snapshot_every: self.snapshot_every,
            passivate_after: Duration::from_secs(self.passivate_after_secs),
            restart_limit: self.restart_limit,
            restart_window: Duration::from_secs(self.restart_window_secs),
            restart_backoff: Duration::from_millis(self.restart_backoff_ms),
            restart_backoff_max: Duration::from_millis(self.restart_backoff_max_ms),
            lease_ttl: Duration::from_secs(self.lease_ttl_secs),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    pub data_dir: PathBuf,
    /// Plaintext keys or `sha256:<hex>` digests; empty means loopback only.
    pub api_keys: Vec<String>,
    /// How long a graceful shutdown waits for requests in flight.
    pub shutdown_grace_secs: u64,
    /// This node's name as the owner of session leases; unset: the host name. Nodes that share
    /// a database need distinct names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `postgres://…` or `sqlite://PATH`; unset means `sqlite://{data_dir}/stead.db`.
    pub url: Option<String>,
    pub max_event_bytes: usize,
    pub max_connections: u32,
    pub connect_timeout_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A `tracing` filter, e.g. `info` or `stead=debug,sqlx=warn`. `RUST_LOG` wins when set.
    pub filter: String,
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// The pooled local ONNX Runtime engine.
    Onnx,
    /// Any OpenAI-compatible HTTP API.
    Openai,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub name: String,
    pub kind: ProviderKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_dir: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// onnx: the local engine's pool.
    #[serde(default, flatten)]
    pub engine: EngineConfig,
}

/// How an `onnx` provider runs (ignored by other kinds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EngineConfig {
    /// `cpu`, `cuda` (fail at start when unavailable) or `auto` (CUDA, else CPU with a warning).
    pub execution_provider: stead_inference::engine::ExecutionProvider,
    /// Engine workers, each with its own session and batch.
    pub workers: usize,
    /// Intra-op threads per worker; 0 = physical cores ÷ workers.
    pub threads_per_worker: usize,
    /// Most sequences one worker decodes together (continuous batching).
    pub max_batch: usize,
    /// Most requests waiting for a worker; more are refused as overloaded.
    pub queue_capacity: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            execution_provider: stead_inference::engine::ExecutionProvider::Cpu,
            workers: 1,
            threads_per_worker: 0,
            max_batch: 8,
            queue_capacity: 64,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    pub name: String,
    pub route: String,
    #[serde(default)]
    pub system_prompt: String,
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// An approval not decided within this many seconds is rejected as expired (unset: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout_secs: Option<u64>,
    #[serde(default)]
    pub tools: Vec<ToolConfig>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    pub name: String,
    /// `webhook`, `memory`, `clock` or `calculator`.
    pub kind: String,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// `never`, `always`, or a condition on the arguments.
    #[serde(default = "default_approval")]
    pub approval: String,
    #[serde(default)]
    pub idempotent: bool,
    /// `webhook`: per-attempt timeout.
    #[serde(default = "default_tool_timeout")]
    pub timeout_secs: u64,
    /// `webhook`: attempts in all (idempotent tools only; others are tried once).
    #[serde(default = "default_tool_attempts")]
    pub attempts: u32,
    /// `memory`: the operations this tool may perform (default all: get, set, list, delete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<Vec<String>>,
}

fn default_tool_timeout() -> u64 {
    10
}

fn default_tool_attempts() -> u32 {
    3
}

impl ToolConfig {
    /// A tool of a built-in kind with the defaults (named after its kind, no approval).
    pub fn builtin(kind: &str) -> Self {
        ToolConfig {
            name: kind.into(),
            kind: kind.into(),
            description: String::new(),
            url: None,
            parameters: None,
            approval: default_approval(),
            idempotent: true,
            timeout_secs: default_tool_timeout(),
            attempts: default_tool_attempts(),
            ops: None,
        }
    }
}

fn default_max_steps() -> u32 {
    8
}

fn default_approval() -> String {
    "never".into()
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
pub const DEFAULT_DATA_DIR: &str = ".stead";
pub const LOCAL_MODEL: &str = "smollm2-135m-instruct";
pub const TOOL_KINDS: [&str; 4] = ["webhook", "memory", "clock", "calculator"];
pub const MEMORY_OPS: [&str; 4] = ["get", "set", "list", "delete"];

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: DEFAULT_LISTEN.into(),
            data_dir: DEFAULT_DATA_DIR.into(),
            api_keys: Vec::new(),
            shutdown_grace_secs: 10,
            node_id: None,
        }
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: None,
            max_event_bytes: stead_persistence::DEFAULT_MAX_EVENT_BYTES,
            max_connections: 8,
            connect_timeout_secs: 5,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            filter: "info".into(),
            format: LogFormat::Text,
        }
    }
}

impl Default for Config {
    /// The built-in configuration: one local provider, one route, one demo agent whose
    /// destructive tool needs approval — enough for `stead serve` alone to give a working chat.
    fn default() -> Self {
        Config {
            server: ServerConfig::default(),
            database: DatabaseConfig::default(),
            log: LogConfig::default(),
            sessions: SessionsConfig::default(),
            providers: vec![ProviderConfig {
                name: "local".into(),
                kind: ProviderKind::Onnx,
                // Resolved at load to `{data_dir}/models/smollm2-135m-instruct`.
                model_dir: None,
                base_url: None,
                api_key_env: None,
                engine: EngineConfig::default(),
            }],
            routes: vec![RouteConfig {
                name: "default".into(),
                targets: vec![TargetConfig {
                    provider: "local".into(),
                    model: LOCAL_MODEL.into(),
                    weight: None,
                    timeout_secs: 120.0,
                    ttft_timeout_secs: None,
                    max_tokens: None,
                    retry: Default::default(),
                }],
                requests_per_min: None,
                tokens_per_min: None,
                cache: true,
            }],
            gateway: GatewayConfig::default(),
            agents: vec![AgentConfig {
                name: "demo".into(),
                route: "default".into(),
                system_prompt: "You are a helpful assistant. You can remember and forget notes."
                    .into(),
                max_steps: 8,
                approval_timeout_secs: None,
                tools: vec![
                    ToolConfig {
                        name: "clock".into(),
                        kind: "clock".into(),
                        description: "The current date and time (UTC)".into(),
                        ..ToolConfig::builtin("clock")
                    },
                    ToolConfig {
                        name: "remember".into(),
                        kind: "memory".into(),
                        description: "Store, read and list notes".into(),
                        ops: Some(vec!["get".into(), "set".into(), "list".into()]),
                        ..ToolConfig::builtin("memory")
                    },
                    ToolConfig {
                        name: "forget".into(),
                        kind: "memory".into(),
                        description: "Delete a stored note (destructive)".into(),
                        approval: "always".into(),
                        ops: Some(vec!["delete".into()]),
                        ..ToolConfig::builtin("memory")
                    },
                ],
            }],
        }
    }
}

/// Where a configuration value may come from besides files and the environment.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config_file: Option<PathBuf>,
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub database_url: Option<String>,
}

/// A configuration problem, phrased for one line on stderr and naming the bad key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn bad(key: &str, problem: impl std::fmt::Display) -> ConfigError {
    ConfigError(format!("invalid configuration: {key}: {problem}"))
}

/// One figment error as `key: problem (in SOURCE)`, where SOURCE is the file or the exact
/// environment variable that supplied the value.
fn describe(error: &figment::Error) -> String {
    let key = error.path.join(".").to_lowercase();
    let source = error.metadata.as_ref().map(|metadata| {
        if metadata.name.contains("environment") {
            format!(
                "environment variable STEAD_{}",
                error.path.join("__").to_uppercase()
            )
        } else {
            match &metadata.source {
                Some(figment::Source::File(path)) => path.display().to_string(),
                _ => metadata.name.to_string(),
            }
        }
    });
    let problem = error.kind.to_string();
    match (key.is_empty(), source) {
        (true, Some(source)) => format!("{problem} (in {source})"),
        (true, None) => problem,
        (false, Some(source)) => format!("{key}: {problem} (in {source})"),
        (false, None) => format!("{key}: {problem}"),
    }
}

impl Config {
    /// Loads every layer and validates the result.
    pub fn load(overrides: &Overrides) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        let file = overrides
            .config_file
            .clone()
            .or_else(|| std::env::var_os("STEAD_CONFIG").map(PathBuf::from));
        match file {
            Some(path) => {
                if !path.is_file() {
                    return Err(ConfigError(format!(
                        "invalid configuration: config file {} does not exist or is not a file",
                        path.display()
                    )));
                }
                figment = figment.merge(Toml::file_exact(path));
            }
            None if Path::new("stead.toml").is_file() => {
                figment = figment.merge(Toml::file_exact("stead.toml"));
            }
            None => {}
        }
        figment = figment.merge(Env::prefixed("STEAD_").ignore(&RESERVED_ENV).split("__"));
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let layers = [
            ("server.listen", env("STEAD_LISTEN")),
            ("server.data_dir", env("STEAD_DATA_DIR")),
            ("database.url", env("DATABASE_URL")),
            ("server.listen", overrides.listen.clone()),
            (
                "server.data_dir",
                overrides
                    .data_dir
                    .as_ref()
                    .map(|d| d.to_string_lossy().into_owned()),
            ),
            ("database.url", overrides.database_url.clone()),
        ];
        for (key, value) in layers {
            if let Some(value) = value {
                figment = figment.merge(Serialized::default(key, value));
            }
        }
        let mut config: Config = figment.extract().map_err(|error| {
            let all: Vec<String> = error.into_iter().map(|e| describe(&e)).collect();
            ConfigError(format!("invalid configuration: {}", all.join("; ")).replace('\n', " "))
        })?;
        config.resolve_defaults();
        config.validate()?;
        Ok(config)
    }

    /// Fills values that depend on others (the local model lives under the data dir).
    pub(crate) fn resolve_defaults(&mut self) {
        for provider in &mut self.providers {
            if provider.kind == ProviderKind::Onnx && provider.model_dir.is_none() {
                provider.model_dir = Some(self.server.data_dir.join("models").join(LOCAL_MODEL));
            }
        }
    }

    /// The socket address to listen on (validated).
    pub fn listen_addr(&self) -> SocketAddr {
        self.server
            .listen
            .parse()
            .expect("server.listen was validated at load")
    }

    /// The database to use: `database.url`, else an SQLite file in the data dir.
    pub fn database_url(&self) -> DatabaseUrl {
        match &self.database.url {
            Some(url) => DatabaseUrl::parse(url).expect("database.url was validated at load"),
            None => DatabaseUrl::Sqlite(self.server.data_dir.join("stead.db")),
        }
    }

    /// Checks every value and cross-reference, naming the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let listen: SocketAddr = self.server.listen.parse().map_err(|_| {
            bad(
                "server.listen",
                format!(
                    "`{}` is not a socket address (expected IP:PORT, e.g. {DEFAULT_LISTEN})",
                    self.server.listen
                ),
            )
        })?;
        for (i, key) in self.server.api_keys.iter().enumerate() {
            let name = format!("server.api_keys[{i}]");
            if let Some(digest) = key.strip_prefix("sha256:") {
                if digest.len() != 64 || !digest.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(bad(&name, "a sha256: key needs 64 hex digits"));
                }
            } else if key.len() < 16 {
                return Err(bad(&name, "an API key needs at least 16 characters"));
            }
        }
        if !listen.ip().is_loopback() && self.server.api_keys.is_empty() {
            return Err(bad(
                "server.listen",
                format!(
                    "{listen} is not a loopback address and server.api_keys is empty; \
                     configure API keys before listening off loopback"
                ),
            ));
        }
        if self.server.data_dir.as_os_str().is_empty() {
            return Err(bad("server.data_dir", "must not be empty"));
        }
        if let Some(url) = &self.database.url {
            DatabaseUrl::parse(url).map_err(|e| bad("database.url", e))?;
        }
        if self.database.max_event_bytes == 0 {
            return Err(bad("database.max_event_bytes", "must be at least 1"));
        }
        if self.database.max_connections == 0 {
            return Err(bad("database.max_connections", "must be at least 1"));
        }
        if self.database.connect_timeout_secs == 0 {
            return Err(bad("database.connect_timeout_secs", "must be at least 1"));
        }
        let sessions = &self.sessions;
        for (name, value) in [
            ("snapshot_every", sessions.snapshot_every.max(0) as u64),
            ("passivate_after_secs", sessions.passivate_after_secs),
            ("restart_limit", sessions.restart_limit as u64),
            ("restart_window_secs", sessions.restart_window_secs),
            ("lease_ttl_secs", sessions.lease_ttl_secs),
        ] {
            if value == 0 {
                return Err(bad(&format!("sessions.{name}"), "must be at least 1"));
            }
        }
        self.validate_models()?;
        self.validate_agents()
    }

    fn validate_models(&self) -> Result<(), ConfigError> {
        let mut seen = Vec::new();
        for (i, provider) in self.providers.iter().enumerate() {
            let key = format!("providers[{i}]");
            if provider.name.is_empty() || seen.contains(&&provider.name) {
                return Err(bad(
                    &format!("{key}.name"),
                    format!("`{}` is empty or used twice", provider.name),
                ));
            }
            seen.push(&provider.name);
            match provider.kind {
                ProviderKind::Onnx if provider.model_dir.is_none() => {
                    return Err(bad(
                        &format!("{key}.model_dir"),
                        "required for kind \"onnx\"",
                    ));
                }
                ProviderKind::Openai => {
                    let base = provider.base_url.as_deref().ok_or_else(|| {
                        bad(&format!("{key}.base_url"), "required for kind \"openai\"")
                    })?;
                    match url::Url::parse(base) {
                        Ok(url) if matches!(url.scheme(), "http" | "https") => {}
                        _ => {
                            return Err(bad(
                                &format!("{key}.base_url"),
                                format!("`{base}` is not an http(s) URL"),
                            ))
                        }
                    }
                }
                _ => {}
            }
        }
        let mut routes = Vec::new();
        for (i, route) in self.routes.iter().enumerate() {
            let key = format!("routes[{i}]");
            if route.name.is_empty() || routes.contains(&&route.name) {
                return Err(bad(
                    &format!("{key}.name"),
                    format!("`{}` is empty or used twice", route.name),
                ));
            }
            routes.push(&route.name);
            if route.targets.is_empty() {
                return Err(bad(&format!("{key}.targets"), "needs at least one target"));
            }
            for (j, target) in route.targets.iter().enumerate() {
                if !seen.contains(&&target.provider) {
                    return Err(bad(
                        &format!("{key}.targets[{j}].provider"),
                        format!("no provider is named `{}`", target.provider),
                    ));
                }
            }
            if let Some(problem) = route.problem() {
                return Err(ConfigError(format!(
                    "invalid configuration: {key}.{problem}"
                )));
            }
        }
        if let Some(problem) = self.gateway.problem() {
            return Err(ConfigError(format!(
                "invalid configuration: gateway.{problem}"
            )));
        }
        Ok(())
    }

    fn validate_agents(&self) -> Result<(), ConfigError> {
        let mut agents = Vec::new();
        for (i, agent) in self.agents.iter().enumerate() {
            let key = format!("agents[{i}]");
            if agent.name.is_empty() || agents.contains(&&agent.name) {
                return Err(bad(
                    &format!("{key}.name"),
                    format!("`{}` is empty or used twice", agent.name),
                ));
            }
            agents.push(&agent.name);
            if !self.routes.iter().any(|r| r.name == agent.route) {
                return Err(bad(
                    &format!("{key}.route"),
                    format!("no route is named `{}`", agent.route),
                ));
            }
            if agent.max_steps == 0 {
                return Err(bad(&format!("{key}.max_steps"), "must be at least 1"));
            }
            if agent.approval_timeout_secs == Some(0) {
                return Err(bad(
                    &format!("{key}.approval_timeout_secs"),
                    "must be at least 1 (leave it out for no expiry)",
                ));
            }
            let mut tools = Vec::new();
            for (j, tool) in agent.tools.iter().enumerate() {
                let key = format!("{key}.tools[{j}]");
                if tool.name.is_empty() || tools.contains(&&tool.name) {
                    return Err(bad(
                        &format!("{key}.name"),
                        format!("`{}` is empty or used twice", tool.name),
                    ));
                }
                tools.push(&tool.name);
                if !TOOL_KINDS.contains(&tool.kind.as_str()) {
                    return Err(bad(
                        &format!("{key}.kind"),
                        format!("`{}` is not one of {}", tool.kind, TOOL_KINDS.join(", ")),
                    ));
                }
                if tool.kind == "webhook" && tool.url.is_none() {
                    return Err(bad(&format!("{key}.url"), "required for kind \"webhook\""));
                }
                stead_actors::ApprovalPolicy::parse(&tool.approval)
                    .map_err(|e| bad(&format!("{key}.approval"), e))?;
                if tool.kind == "webhook" && (tool.timeout_secs == 0 || tool.attempts == 0) {
                    return Err(bad(
                        &format!("{key}.timeout_secs"),
                        "timeout_secs and attempts must be at least 1",
                    ));
                }
                if let Some(ops) = &tool.ops {
                    if tool.kind != "memory" {
                        return Err(bad(&format!("{key}.ops"), "only for kind \"memory\""));
                    }
                    if ops.is_empty() || ops.iter().any(|op| !MEMORY_OPS.contains(&op.as_str())) {
                        return Err(bad(
                            &format!("{key}.ops"),
                            format!("a non-empty list of {}", MEMORY_OPS.join(", ")),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The configuration as TOML, with secrets replaced (`--dump-config`).
    pub fn to_redacted_toml(&self) -> String {
        let mut shown = self.clone();
        for key in &mut shown.server.api_keys {
            if !key.starts_with("sha256:") {
                *key = "***".into();
            }
        }
        if let Some(url) = &mut shown.database.url {
            *url = stead_persistence::redact_url(url);
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(mutate: impl FnOnce(&mut Config)) -> String {
        let mut config = Config::default();
        config.resolve_defaults();
        mutate(&mut config);
        config.validate().expect_err("must be refused").0
    }

    #[test]
    fn defaults_are_valid_and_loopback() {
        let mut config = Config::default();
        config.resolve_defaults();
        config.validate().unwrap();
        assert!(config.listen_addr().ip().is_loopback());
        assert_eq!(
            config.database_url(),
            DatabaseUrl::Sqlite(PathBuf::from(".stead/stead.db"))
        );
    }

    #[test]
    fn api_keys_are_checked_and_allow_listening_off_loopback() {
        let mut config = Config::default();
        config.resolve_defaults();
        config.server.listen = "0.0.0.0:8787".into();
        assert!(config.validate().is_err());
        config.server.api_keys = vec!["a-long-enough-api-key".into()];
        config.validate().unwrap();
        assert!(invalid(|c| c.server.api_keys = vec!["short".into()]).contains("api_keys[0]"));
        assert!(invalid(|c| c.server.api_keys = vec!["sha256:abc".into()]).contains("64 hex"));
    }

    #[test]
    fn cross_references_and_duplicates_are_named() {
        assert!(invalid(|c| c.routes[0].targets[0].provider = "nope".into())
            .contains("routes[0].targets[0].provider"));
        assert!(invalid(|c| {
            let p = c.providers[0].clone();
            c.providers.push(p);
        })
        .contains("providers[1].name"));
        assert!(invalid(|c| c.agents[0].tools[0].kind = "shell".into())
            .contains("agents[0].tools[0].kind"));
        assert!(invalid(|c| {
            c.agents[0].tools[0].kind = "webhook".into();
            c.agents[0].tools[0].url = None;
        })
        .contains("agents[0].tools[0].url"));
        assert!(invalid(|c| c.providers.push(ProviderConfig {
            name: "remote".into(),
            kind: ProviderKind::Openai,
            model_dir: None,
            base_url: Some("ftp://x".into()),
            api_key_env: None,
            engine: EngineConfig::default(),
        }))
        .contains("providers[1].base_url"));
        assert!(invalid(|c| c.database.max_event_bytes = 0).contains("database.max_event_bytes"));
        assert!(invalid(|c| c.sessions.restart_limit = 0).contains("sessions.restart_limit"));
        assert!(invalid(|c| c.agents[0].approval_timeout_secs = Some(0))
            .contains("agents[0].approval_timeout_secs"));
        assert!(
            invalid(|c| c.agents[0].tools[0].approval = "table = users".into())
                .contains("agents[0].tools[0].approval")
        );
        assert!(
            invalid(|c| c.agents[0].tools[1].ops = Some(vec!["drop".into()]))
                .contains("agents[0].tools[1].ops")
        );
        assert!(
            invalid(|c| c.agents[0].tools[0].ops = Some(vec!["get".into()]))
                .contains("only for kind \"memory\"")
        );
    }
}

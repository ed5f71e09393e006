//! The crate `stead-config`: Stead's configuration, the one place its sections are defined.
//! Built-in defaults → `stead.toml` (`--config` / `STEAD_CONFIG`) → `STEAD_*`
//! environment variables → command-line flags, merged by figment and validated once at start.
//!
//! Environment: `STEAD_LISTEN`, `STEAD_DATA_DIR` and `DATABASE_URL` set `server.listen`,
//! `server.data_dir` and `database.url`; any other key is `STEAD_<SECTION>__<KEY>` (double
//! underscore between levels), e.g. `STEAD_DATABASE__MAX_EVENT_BYTES=2097152`.

mod guardrails;
mod mcp;
pub mod oidc;
pub mod redact;
mod sections;
mod speech;
#[cfg(test)]
mod tests;
mod tools;
mod validate;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use stead_persistence::DatabaseUrl;
pub use stead_router::config::{GatewayConfig, RouteConfig, TargetConfig};

pub use mcp::{invalid_server_name, McpServerConfig};
pub use sections::{
    AgentConfig, ArtifactsConfig, AuditConfig, BudgetAlertsConfig, ClusterConfig, DatabaseConfig,
    EngineConfig, KnowledgeConfig, LogConfig, LogFormat, ProviderConfig, ProviderKind,
    SchedulesConfig, SearchMode, ServerConfig, SessionsConfig,
};
pub use speech::SpeechConfig;
pub use tools::{ToolConfig, ToolKind};

/// Creates the data directory and proves it writable, so that a bad one fails at start with a
/// message naming it rather than later with an I/O error.
pub fn prepare_data_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("server.data_dir: cannot create {}: {e}", dir.display()))?;
    let probe = dir.join(".stead-write-probe");
    std::fs::write(&probe, b"ok")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| anyhow::anyhow!("server.data_dir: {} is not writable: {e}", dir.display()))
}

/// Variables with a fixed meaning that the generic `STEAD_*` mapping must not see.
const RESERVED_ENV: [&str; 3] = ["CONFIG", "LISTEN", "DATA_DIR"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub log: LogConfig,
    pub sessions: SessionsConfig,
    /// Schedules and timers (`[schedules]`, docs/schedules.md).
    pub schedules: SchedulesConfig,
    pub providers: Vec<ProviderConfig>,
    pub routes: Vec<RouteConfig>,
    pub agents: Vec<AgentConfig>,
    /// MCP servers whose tools agents may use (`[[mcp_servers]]`, docs/mcp.md).
    pub mcp_servers: Vec<McpServerConfig>,
    /// The model router's cache, cooldown, limits, prices and request log (`[gateway]`).
    pub gateway: GatewayConfig,
    /// Several nodes on one PostgreSQL (`[cluster]`, docs/cluster.md; absent: alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterConfig>,
    /// Knowledge collections (`[knowledge]`, docs/knowledge.md).
    pub knowledge: KnowledgeConfig,
    /// The audit trail (`[audit]`, docs/audit.md).
    pub audit: AuditConfig,
    /// The artifact store (`[artifacts]`, docs/artifacts.md).
    pub artifacts: ArtifactsConfig,
    /// Speech to text (`[speech]`, docs/speech.md).
    pub speech: SpeechConfig,
    /// Where budget alerts go (`[budget_alerts]`, docs/tenancy.md).
    pub budget_alerts: BudgetAlertsConfig,
    /// Checks routes run on the text they send (`[[guardrails]]`, docs/guardrails.md).
    pub guardrails: Vec<stead_guardrails::GuardrailConfig>,
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
pub const DEFAULT_DATA_DIR: &str = ".stead";
/// The bundled model the built-in configuration serves (`stead setup` prepares it).
pub const LOCAL_MODEL: &str = stead_inference::setup::DEFAULT_MODEL;
/// The embedding model the built-in configuration serves (`stead setup` prepares it).
pub const EMBEDDING_MODEL: &str = stead_inference::embedding::DEFAULT_EMBEDDING_MODEL;
/// The built-in embedding provider's name and its route's.
pub const LOCAL_EMBEDDING_PROVIDER: &str = "local-embed";
pub const EMBEDDING_ROUTE: &str = "embed";
pub const MEMORY_OPS: [&str; 4] = ["get", "set", "list", "delete"];

impl Default for Config {
    /// The built-in configuration: one local provider, one route, one demo agent whose
    /// destructive tool needs approval — enough for `stead serve` alone to give a working chat.
    fn default() -> Self {
        Config {
            server: ServerConfig::default(),
            database: DatabaseConfig::default(),
            log: LogConfig::default(),
            sessions: SessionsConfig::default(),
            schedules: SchedulesConfig::default(),
            providers: vec![ProviderConfig {
                name: "local".into(),
                kind: ProviderKind::Onnx,
                // Resolved at load to `{data_dir}/models/qwen2.5-coder-0.5b-instruct`.
                model_dir: None,
                base_url: None,
                api_key_env: None,
                max_answer_mib: None,
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
                guardrails: Vec::new(),
                images: None,
            }],
            gateway: GatewayConfig::default(),
            cluster: None,
            knowledge: KnowledgeConfig::default(),
            audit: AuditConfig::default(),
            artifacts: ArtifactsConfig::default(),
            speech: SpeechConfig::default(),
            budget_alerts: BudgetAlertsConfig::default(),
            guardrails: Vec::new(),
            mcp_servers: Vec::new(),
            agents: vec![AgentConfig {
                name: "demo".into(),
                route: "default".into(),
                // Names the cases for tools: a 0.5B model otherwise answers small talk with
                // JSON (see docs/inference.md, "Tool calling").
                system_prompt: "You are a helpful assistant. Call a tool only when the user \
                                asks you to remember or forget a note, asks for the date or \
                                time, or asks for a calculation; otherwise answer in plain text. \
                                The notes you saved are listed under Memory below; when the \
                                user asks about them, answer from that list without a tool."
                    .into(),
                max_steps: 8,
                approval_timeout_secs: None,
                message_mode: Default::default(),
                callbacks: Default::default(),
                context: Default::default(),
                guardrails: Vec::new(),
                tools: vec![
                    ToolConfig {
                        name: "clock".into(),
                        kind: ToolKind::Clock,
                        // Imperative: a noun phrase ("The current date and time (UTC)") is
                        // copied by the 0.5B model as the opening of unrelated replies ("The
                        // current date and time (UTC) is hunter2.").
                        description: "Get the current date and time in UTC".into(),
                        ..ToolConfig::builtin(ToolKind::Clock)
                    },
                    // Notes live in the session's pinned memory block (docs/sessions.md,
                    // "Memory block"): shown in every prompt, so the model answers "what is
                    // my wifi password?" from it with no tool call, and never compacted away.
                    ToolConfig {
                        name: "remember".into(),
                        kind: ToolKind::MemoryBlock,
                        description: "Save a note the user asks you to remember, as one line \
                                      of text"
                            .into(),
                        ops: Some(vec!["append".into()]),
                        ..ToolConfig::builtin(ToolKind::MemoryBlock)
                    },
                    ToolConfig {
                        name: "forget".into(),
                        kind: ToolKind::MemoryBlock,
                        description: "Delete a saved note (destructive): old is a word of the \
                                      note to delete"
                            .into(),
                        approval: "always".into(),
                        ops: Some(vec!["remove".into()]),
                        ..ToolConfig::builtin(ToolKind::MemoryBlock)
                    },
                    ToolConfig {
                        name: "calculator".into(),
                        kind: ToolKind::Calculator,
                        description: "Evaluate an arithmetic expression".into(),
                        ..ToolConfig::builtin(ToolKind::Calculator)
                    },
                ],
            }],
        }
    }
}

/// The provider of the built-in embedding model (docs/knowledge.md).
fn local_embedding_provider() -> ProviderConfig {
    ProviderConfig {
        name: LOCAL_EMBEDDING_PROVIDER.into(),
        kind: ProviderKind::OnnxEmbedding,
        // Resolved at load to `{data_dir}/models/all-minilm-l6-v2`.
        model_dir: None,
        base_url: None,
        api_key_env: None,
        max_answer_mib: None,
        engine: EngineConfig {
            // Two sessions that take a request's small runs side by side, each with half the
            // cores (docs/inference.md, "Embeddings").
            workers: 2,
            max_batch: 32,
            queue_capacity: 256,
            ..EngineConfig::default()
        },
    }
}

/// The built-in `embed` route to it.
fn local_embedding_route() -> RouteConfig {
    RouteConfig {
        name: EMBEDDING_ROUTE.into(),
        targets: vec![TargetConfig {
            provider: LOCAL_EMBEDDING_PROVIDER.into(),
            model: EMBEDDING_MODEL.into(),
            weight: None,
            timeout_secs: 60.0,
            ttft_timeout_secs: None,
            max_tokens: None,
            retry: Default::default(),
        }],
        requests_per_min: None,
        tokens_per_min: None,
        cache: true,
        guardrails: Vec::new(),
        images: None,
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

    /// Fills values that depend on others (the local model lives under the data dir); `load`
    /// calls it, and so must code that builds a `Config` another way.
    pub fn resolve_defaults(&mut self) {
        // The built-in embedding model and its route, unless the configuration has an
        // embedding provider or an `embed` route of its own (a file's `[[providers]]` or
        // `[[routes]]` replace the built-in lists, and must not lose embeddings with them).
        let own_embeddings =
            self.providers.iter().any(|p| {
                p.kind == ProviderKind::OnnxEmbedding || p.name == LOCAL_EMBEDDING_PROVIDER
            }) || self.routes.iter().any(|r| r.name == EMBEDDING_ROUTE);
        if !own_embeddings {
            self.providers.push(local_embedding_provider());
            self.routes.push(local_embedding_route());
        }
        for provider in &mut self.providers {
            if provider.model_dir.is_none() {
                let model = match provider.kind {
                    ProviderKind::Onnx => LOCAL_MODEL,
                    ProviderKind::OnnxEmbedding => EMBEDDING_MODEL,
                    ProviderKind::Openai | ProviderKind::Anthropic => continue,
                };
                provider.model_dir = Some(self.server.data_dir.join("models").join(model));
            }
        }
    }

    /// The socket address to listen on (validated).
    ///
    /// # Panics
    /// On a configuration that did not come through `load` (which validates `server.listen`).
    #[allow(clippy::expect_used)]
    pub fn listen_addr(&self) -> SocketAddr {
        self.server
            .listen
            .parse()
            .expect("server.listen was validated at load")
    }

    /// The database to use: `database.url`, else an SQLite file in the data dir.
    ///
    /// # Panics
    /// On a configuration that did not come through `load` (which validates `database.url`).
    #[allow(clippy::expect_used)]
    pub fn database_url(&self) -> DatabaseUrl {
        match &self.database.url {
            Some(url) => DatabaseUrl::parse(url).expect("database.url was validated at load"),
            None => DatabaseUrl::Sqlite(self.server.data_dir.join("stead.db")),
        }
    }

    /// The configuration as TOML, with secrets replaced (`--dump-config`): API keys, the
    /// database password, and the credentials and query values of webhook and provider URLs.
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
        for tool in shown.agents.iter_mut().flat_map(|a| a.tools.iter_mut()) {
            if let Some(url) = &mut tool.url {
                *url = redact_webhook_url(url);
            }
        }
        for server in &mut shown.mcp_servers {
            if let Some(url) = &mut server.url {
                *url = redact_webhook_url(url);
            }
            for value in server.headers.values_mut().chain(server.env.values_mut()) {
                *value = "***".into();
            }
        }
        for provider in &mut shown.providers {
            if let Some(url) = &mut provider.base_url {
                *url = redact_webhook_url(url);
            }
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

/// A URL without its secrets: the password of its user info and every query value (a token
/// often travels as `?key=…`).
pub fn redact_webhook_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return "<unparseable URL>".to_string();
    };
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("***"));
    }
    if parsed.query().is_some() {
        let names: Vec<String> = parsed
            .query_pairs()
            .map(|(name, _)| name.into_owned())
            .collect();
        parsed
            .query_pairs_mut()
            .clear()
            .extend_pairs(names.iter().map(|name| (name.as_str(), "***")));
    }
    parsed.to_string()
}

//! `[[mcp_servers]]`: the MCP servers whose tools agents may use (docs/mcp.md).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Letters, digits, `-` and single `_` (the model sees `{name}__{tool}`), at most 32.
    pub name: String,
    /// stdio: the program Stead starts (found on `PATH`), with `args`, and `env` as its
    /// environment (with only `stead::mcp::server::INHERITED_ENV` of Stead's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Streamable HTTP: the server's endpoint (`http://…/mcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Streamable HTTP: headers sent with every request, as given.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Streamable HTTP: headers whose values are read from environment variables at start
    /// (`{"Authorization" = "FILES_MCP_TOKEN"}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers_env: BTreeMap<String, String>,
    /// How long starting the server (spawn or connect, `initialize`) and listing its tools
    /// may take.
    #[serde(default = "default_start_timeout")]
    pub start_timeout_secs: u64,
    /// How long one tool call may take; then it is cancelled (`notifications/cancelled`) and
    /// fails.
    #[serde(default = "default_call_timeout")]
    pub call_timeout_secs: u64,
}

fn default_start_timeout() -> u64 {
    30
}

fn default_call_timeout() -> u64 {
    60
}

/// Why `name` cannot name an MCP server.
pub fn invalid_server_name(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 32 {
        return Some("must be 1 to 32 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Some("may hold only letters, digits, `-` and `_`");
    }
    if name.contains("__") || name.ends_with('_') {
        return Some("may not hold `__` or end with `_` (`__` separates it from tool names)");
    }
    None
}

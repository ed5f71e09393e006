//! A configured tool (`[[agents.tools]]`): its kind and its settings, each with its default.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use stead_actors::Approver;

use crate::sections::default_approval;

/// What a configured tool is (docs/agents.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// `POST {url}` with the call (`WebhookTool`).
    Webhook,
    /// Notes in the session's key-value store.
    Memory,
    /// The session's memory block, in every prompt.
    MemoryBlock,
    Clock,
    Calculator,
    /// The tools of a `[[mcp_servers]]` entry.
    Mcp,
    /// The session's own schedules.
    Schedule,
    /// A sub-agent: each call runs a child session of another agent.
    Agent,
    /// A search of knowledge collections.
    Knowledge,
}

impl ToolKind {
    /// The name the configuration spells it with.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::Webhook => "webhook",
            ToolKind::Memory => "memory",
            ToolKind::MemoryBlock => "memory_block",
            ToolKind::Clock => "clock",
            ToolKind::Calculator => "calculator",
            ToolKind::Mcp => "mcp",
            ToolKind::Schedule => "schedule",
            ToolKind::Agent => "agent",
            ToolKind::Knowledge => "knowledge",
        }
    }
}

impl std::fmt::Display for ToolKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// The name the model sees (`mcp` entries: unused; the model sees `{server}__{tool}`).
    #[serde(default)]
    pub name: String,
    pub kind: ToolKind,
    /// `mcp`: the `[[mcp_servers]]` entry whose tools this entry takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// `mcp`: the server's tools this entry takes: names or globs (`*`, `?`); default all.
    /// Where several entries match a tool, the most specific wins (an exact name, then the
    /// glob with the most literal characters, then the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `webhook`: headers sent with every request, as given.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// `webhook`: headers whose values are read from environment variables at start
    /// (`{"Authorization" = "HOOK_TOKEN"}`): the `_env` convention for secrets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers_env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// `never`, `always`, or a condition on the arguments.
    #[serde(default = "default_approval")]
    pub approval: String,
    #[serde(default)]
    pub idempotent: bool,
    /// Who may approve its calls: `any` (default) or `operator` (session tokens may not).
    #[serde(default, skip_serializing_if = "Approver::is_any")]
    pub approver: Approver,
    /// `webhook`: per-attempt timeout.
    #[serde(default = "default_tool_timeout")]
    pub timeout_secs: u64,
    /// `webhook`: attempts in all (idempotent tools only; others are tried once).
    #[serde(default = "default_tool_attempts")]
    pub attempts: u32,
    /// `memory`: the operations this tool may perform (default all: get, set, list, delete);
    /// `schedule`: create, list, cancel (default all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<Vec<String>>,
    /// `schedule`: the kinds of schedule `create` may make (default all: at, delay, cron,
    /// every).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Vec<String>>,
    /// `agent`: the configured agent whose child sessions this tool's calls start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `knowledge`: the collections this tool reads (docs/knowledge.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collections: Option<Vec<String>>,
    /// `knowledge`: chunks a call returns (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// `knowledge`: `exact`, `ann` or `hybrid` (default `exact`: docs/knowledge.md, "Evaluation").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    /// `memory_block`: the most characters the pinned block may hold (default 2,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_chars: Option<usize>,
}

fn default_tool_timeout() -> u64 {
    10
}

fn default_tool_attempts() -> u32 {
    3
}

impl ToolConfig {
    /// A tool of a built-in kind with the defaults (named after its kind, no approval).
    pub fn builtin(kind: ToolKind) -> Self {
        ToolConfig {
            name: kind.as_str().into(),
            kind,
            server: None,
            tools: None,
            description: String::new(),
            url: None,
            headers: BTreeMap::new(),
            headers_env: BTreeMap::new(),
            parameters: None,
            approval: default_approval(),
            idempotent: true,
            approver: Approver::Any,
            timeout_secs: default_tool_timeout(),
            attempts: default_tool_attempts(),
            ops: None,
            timings: None,
            agent: None,
            collections: None,
            top_k: None,
            search: None,
            max_chars: None,
        }
    }
}

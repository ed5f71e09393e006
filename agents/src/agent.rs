//! Agents from configuration: each `[[agents]]` entry becomes a `stead_actors::session::Agent`
//! with its loop rules and its `[[agents.tools]]` built as tools of their kinds; `kind = "mcp"`
//! entries become the agent's dynamic tools from its MCP servers (`crate::mcp`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use stead_actors::agent_tool::AgentTool;
use stead_actors::schedule_tool::{Builtin, ScheduleTool, ScheduleToolRules};
use stead_actors::session::Agent;
use stead_actors::tools::{CalculatorTool, ClockTool, MemoryTool, Tool, ToolInfo, WebhookTool};
use stead_actors::{AgentRules, ApprovalPolicy, DynamicToolRule, ToolRules};
use stead_persistence::Kv;

use crate::knowledge::tool::KnowledgeTool;
use crate::knowledge::Knowledge;
use crate::mcp::McpRegistry;
use stead_config::{AgentConfig, Config, ToolConfig, ToolKind};

/// Every configured agent, ready for the session registry; `mcp` holds the configured MCP
/// servers (agents with `kind = "mcp"` entries take their tools from it).
pub fn build(
    config: &Config,
    store: &Arc<dyn Kv>,
    mcp: Option<&Arc<McpRegistry>>,
    knowledge: Option<&Arc<Knowledge>>,
) -> anyhow::Result<Vec<Agent>> {
    let client = webhook_client()?;
    config
        .agents
        .iter()
        .map(|agent| {
            let mut built = build_agent(agent, store, &client, knowledge)?;
            built.rules.schedules = config.schedules.limits(config.sessions.max_queued_messages);
            built.rules.delegation = stead_actors::Delegation {
                max_depth: config.sessions.max_delegation_depth,
                max_fanout: config.sessions.max_delegation_fanout,
                max_steps: config.sessions.max_delegation_steps,
                max_sessions: config.sessions.max_delegation_sessions,
            };
            built.dynamic = match mcp {
                Some(mcp) => mcp_tools(agent, &built.rules, mcp, config)?,
                None => None,
            };
            Ok(built)
        })
        .collect()
}

/// The agent's MCP tools, when it has `kind = "mcp"` entries.
fn mcp_tools(
    agent: &AgentConfig,
    rules: &AgentRules,
    mcp: &Arc<McpRegistry>,
    config: &Config,
) -> anyhow::Result<Option<Arc<dyn stead_actors::tools::DynamicTools>>> {
    let mut servers: Vec<Arc<crate::mcp::McpServer>> = Vec::new();
    for tool in agent.tools.iter().filter(|t| t.kind == ToolKind::Mcp) {
        let name = tool.server.as_deref().unwrap_or_default();
        let server = mcp
            .server(name)
            .with_context(|| format!("agent `{}`: no MCP server `{name}`", agent.name))?;
        if !servers.iter().any(|s| Arc::ptr_eq(s, server)) {
            servers.push(server.clone());
        }
    }
    if servers.is_empty() {
        return Ok(None);
    }
    Ok(Some(Arc::new(crate::mcp::AgentMcp::new(
        servers,
        rules.clone(),
        mcp.generation(),
        config.database.max_event_bytes,
    ))))
}

/// One agent with its configured tools (not its MCP tools: [`build`] adds them); its rules
/// carry each tool's compiled argument schema and the policies of its MCP entries.
pub fn build_agent(
    config: &AgentConfig,
    store: &Arc<dyn Kv>,
    client: &reqwest::Client,
    knowledge: Option<&Arc<Knowledge>>,
) -> anyhow::Result<Agent> {
    let mut tools: stead_actors::session::AgentTools = Default::default();
    for tool in config.tools.iter().filter(|t| t.kind != ToolKind::Mcp) {
        let built = build_tool(tool, store, client, knowledge)
            .with_context(|| format!("agent `{}`, tool `{}`", config.name, tool.name))?;
        tools.insert(tool.name.clone(), built);
    }
    let mut rules = rules(config)?;
    for (name, tool) in &tools {
        if let Some(tool_rules) = rules.tools.get_mut(name) {
            tool_rules.arguments = stead_actors::ArgumentSchema::compile(&tool.parameters())
                .with_context(|| format!("agent `{}`, tool `{name}`", config.name))?;
        }
    }
    Ok(Agent {
        name: config.name.clone(),
        system_prompt: config.system_prompt.clone(),
        rules,
        tools,
        dynamic: None,
        guardrails: None,
    })
}

/// Gives each agent with `guardrails` its [`ResultGuard`](stead_actors::session::ResultGuard):
/// the configured guardrails it names, in order, asking models through `router`.
pub fn guard_results(
    agents: &mut [Agent],
    config: &Config,
    router: &Arc<stead_router::Router>,
) -> anyhow::Result<()> {
    let built = stead_guardrails::Guardrails::build(&config.guardrails)?;
    // The router asks guardrails' models itself (`purpose: guardrail` in its log).
    let judge: Arc<dyn stead_guardrails::judge::Judge> = router.clone();
    for agent in agents.iter_mut() {
        let Some(configured) = config.agents.iter().find(|a| a.name == agent.name) else {
            continue;
        };
        if configured.guardrails.is_empty() {
            continue;
        }
        let guardrails = configured
            .guardrails
            .iter()
            .map(|name| {
                built
                    .get(name)
                    .with_context(|| format!("agent `{}`: no guardrail `{name}`", agent.name))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        agent.guardrails = Some(Arc::new(stead_actors::session::ResultGuard {
            guardrails,
            judge: Some(judge.clone()),
        }));
    }
    Ok(())
}

/// The HTTP client webhook tools call through ([`stead_actors::tools::webhook_client`]: no
/// redirects, no `Referer`, no proxy from the environment).
pub fn webhook_client() -> anyhow::Result<reqwest::Client> {
    stead_actors::tools::webhook_client().context("cannot build the webhook HTTP client")
}

/// The parts of an agent's configuration its decisions depend on, without the tools' argument
/// schemas ([`build_agent`] adds them from the built tools).
pub fn rules(config: &AgentConfig) -> anyhow::Result<AgentRules> {
    let mut tools = BTreeMap::new();
    let mut dynamic = Vec::new();
    for tool in &config.tools {
        let approval = ApprovalPolicy::parse(&tool.approval)
            .with_context(|| format!("agent `{}`, tool `{}`", config.name, tool.name))?;
        if tool.kind == ToolKind::Mcp {
            let server = tool.server.as_deref().unwrap_or_default();
            let all = ["*".to_string()];
            for glob in tool.tools.as_deref().unwrap_or(&all) {
                dynamic.push(DynamicToolRule {
                    pattern: crate::mcp::tools::pattern(server, glob),
                    approval: approval.clone(),
                    idempotent: tool.idempotent,
                    approver: tool.approver,
                });
            }
            continue;
        }
        let builtin = match tool.kind {
            ToolKind::Schedule => Some(Builtin::Schedule(schedule_rules(tool))),
            ToolKind::MemoryBlock => Some(Builtin::Memory {
                max_chars: memory_block_chars(tool),
                ops: memory_block_ops(tool),
            }),
            ToolKind::Agent => Some(Builtin::Agent {
                agent: tool.agent.clone().unwrap_or_default(),
            }),
            _ => None,
        };
        tools.insert(
            tool.name.clone(),
            ToolRules {
                approval,
                // A built-in call journals its effect with its result, and a knowledge search
                // only reads: always safe to re-run.
                idempotent: tool.idempotent
                    || builtin.is_some()
                    || tool.kind == ToolKind::Knowledge,
                arguments: Default::default(),
                approver: tool.approver,
                builtin,
            },
        );
    }
    Ok(AgentRules {
        route: config.route.clone(),
        max_steps: config.max_steps,
        tools,
        approval_timeout: config.approval_timeout_secs.map(Duration::from_secs),
        dynamic,
        message_mode: config.message_mode,
        schedules: Default::default(),
        callbacks: config.callbacks.clone(),
        delegation: Default::default(),
        context: stead_actors::context::ContextRules {
            max_prompt_tokens: config.context.max_prompt_tokens,
            strategy: config.context.strategy,
            summary_route: config.context.summary_route.clone(),
            max_tool_result_tokens: config.context.max_tool_result_tokens,
        },
    })
}

/// The size limit of a `kind = "memory_block"` entry's block.
fn memory_block_chars(config: &ToolConfig) -> usize {
    config
        .max_chars
        .unwrap_or(stead_actors::memory_block::DEFAULT_MAX_CHARS)
}

/// The operations a `kind = "memory_block"` entry offers: its `ops`, all by default.
fn memory_block_ops(config: &ToolConfig) -> Vec<String> {
    config.ops.clone().unwrap_or_else(|| {
        stead_actors::memory_block::OPS
            .iter()
            .map(|s| s.to_string())
            .collect()
    })
}

/// What a `kind = "schedule"` entry offers: its `ops` and `timings`, all by default.
fn schedule_rules(config: &ToolConfig) -> ScheduleToolRules {
    let default = ScheduleToolRules::default();
    ScheduleToolRules {
        ops: config.ops.clone().unwrap_or(default.ops),
        timings: config.timings.clone().unwrap_or(default.timings),
    }
}

/// `sha256:…` of the agent's configuration section (canonical JSON), written into exports so
/// a recording can be matched to the configuration that made it.
pub fn config_hash(config: &AgentConfig) -> String {
    use sha2::Digest;
    // Plain data with string keys: serializing cannot fail.
    #[allow(clippy::expect_used)]
    let canonical = serde_json::to_vec(config).expect("agent configuration serializes");
    let digest = sha2::Sha256::digest(&canonical);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A webhook's headers: `headers` as given, `headers_env` read from the environment.
fn webhook_headers(config: &ToolConfig) -> anyhow::Result<reqwest::header::HeaderMap> {
    headers(&config.headers, &config.headers_env)
}

/// Headers of a webhook or an MCP server: `literal` as given, `from_env` read from the
/// environment. A missing variable or a value that is not a valid header stops the start,
/// naming the header and the variable — never the value.
pub(crate) fn headers(
    literal: &BTreeMap<String, String>,
    from_env: &BTreeMap<String, String>,
) -> anyhow::Result<reqwest::header::HeaderMap> {
    use reqwest::header::{HeaderName, HeaderValue};
    let mut headers = reqwest::header::HeaderMap::new();
    let literal = literal.iter().map(|(n, v)| (n, v.clone(), None));
    let from_env = from_env
        .iter()
        .map(|(name, variable)| {
            let value = std::env::var(variable).map_err(|_| {
                anyhow::anyhow!(
                    "headers_env.{name}: the environment variable `{variable}` is not set"
                )
            })?;
            Ok((name, value, Some(variable)))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (name, value, variable) in literal.chain(from_env) {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| anyhow::anyhow!("`{name}` is not a valid header name"))?;
        let mut value = HeaderValue::from_str(&value).map_err(|_| match variable {
            Some(v) => {
                anyhow::anyhow!("headers_env.{name}: `{v}` does not hold a valid header value")
            }
            None => anyhow::anyhow!("headers.{name}: not a valid header value"),
        })?;
        value.set_sensitive(variable.is_some());
        headers.insert(header, value);
    }
    Ok(headers)
}

fn build_tool(
    config: &ToolConfig,
    store: &Arc<dyn Kv>,
    client: &reqwest::Client,
    knowledge: Option<&Arc<Knowledge>>,
) -> anyhow::Result<Arc<dyn Tool>> {
    let info = ToolInfo {
        name: config.name.clone(),
        description: config.description.clone(),
        approval: ApprovalPolicy::parse(&config.approval).map_err(anyhow::Error::msg)?,
        idempotent: config.idempotent,
    };
    Ok(match config.kind {
        ToolKind::Clock => Arc::new(ClockTool { info }),
        ToolKind::Calculator => Arc::new(CalculatorTool { info }),
        ToolKind::Memory => {
            let mut memory = MemoryTool::all_ops(info, store.clone());
            if let Some(ops) = &config.ops {
                memory.ops = ops.clone();
            }
            Arc::new(memory)
        }
        ToolKind::Agent => Arc::new(AgentTool {
            info,
            agent: config
                .agent
                .clone()
                .context("an agent tool needs `agent`")?,
            parameters: config
                .parameters
                .clone()
                .unwrap_or_else(AgentTool::default_parameters),
        }),
        ToolKind::MemoryBlock => Arc::new(stead_actors::memory_block::MemoryBlockTool {
            info,
            max_chars: memory_block_chars(config),
            ops: memory_block_ops(config),
        }),
        ToolKind::Schedule => Arc::new(ScheduleTool {
            info,
            rules: schedule_rules(config),
        }),
        ToolKind::Webhook => Arc::new(WebhookTool {
            info,
            url: config.url.clone().context("a webhook tool needs `url`")?,
            headers: webhook_headers(config)?,
            parameters: config
                .parameters
                .clone()
                .unwrap_or_else(|| json!({ "type": "object" })),
            timeout: Duration::from_secs(config.timeout_secs),
            attempts: config.attempts,
            client: client.clone(),
        }),
        ToolKind::Knowledge => {
            let collections = config.collections.clone().unwrap_or_default();
            let mut info = info;
            if info.description.is_empty() {
                info.description = KnowledgeTool::default_description(&collections);
            }
            info.idempotent = true;
            Arc::new(KnowledgeTool {
                info,
                service: knowledge.cloned(),
                collections,
                top_k: config
                    .top_k
                    .unwrap_or(crate::knowledge::tool::DEFAULT_TOP_K),
                mode: config
                    .search
                    .as_deref()
                    .and_then(stead_config::SearchMode::parse)
                    .unwrap_or(stead_config::SearchMode::Exact),
            })
        }
        ToolKind::Mcp => anyhow::bail!("an `mcp` entry is its server's tools, not one tool"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stead_persistence::{DatabaseUrl, StoreOptions};

    #[tokio::test]
    async fn the_demo_agent_gates_its_destructive_tool() {
        let dir = tempfile::tempdir().unwrap();
        let store = stead_persistence::open(StoreOptions::new(DatabaseUrl::Sqlite(
            dir.path().join("a.db"),
        )))
        .await
        .unwrap();
        let agents = build(
            &Config::default(),
            &(store.clone() as Arc<dyn Kv>),
            None,
            None,
        )
        .unwrap();
        assert_eq!(agents.len(), 1);
        let demo = &agents[0];
        assert_eq!(demo.name, "demo");
        // In the configuration's order: the order the model sees them in.
        let names: Vec<&str> = demo.tools.keys().map(String::as_str).collect();
        assert_eq!(names, ["clock", "remember", "forget", "calculator"]);
        assert_eq!(demo.rules.tools["forget"].approval, ApprovalPolicy::Always);
        assert_eq!(demo.rules.tools["remember"].approval, ApprovalPolicy::Never);
        assert_eq!(
            demo.tools["forget"].parameters()["properties"]["op"]["enum"],
            json!(["remove"])
        );
        assert_eq!(
            demo.tools["remember"].parameters()["properties"]["op"]["enum"],
            json!(["append"])
        );
        // Both edit the session's pinned memory block.
        for tool in ["remember", "forget"] {
            assert!(matches!(
                &demo.rules.tools[tool].builtin,
                Some(stead_actors::schedule_tool::Builtin::Memory { .. })
            ));
        }
        store.shutdown().await;
    }

    #[tokio::test]
    async fn configured_tools_keep_their_policies_and_settings() {
        let dir = tempfile::tempdir().unwrap();
        let store = stead_persistence::open(StoreOptions::new(DatabaseUrl::Sqlite(
            dir.path().join("a.db"),
        )))
        .await
        .unwrap();
        let mut config: Config = toml::from_str(
            r#"
            [[routes]]
            name = "default"
            targets = [{ provider = "local", model = "m" }]

            [[agents]]
            name = "ops"
            route = "default"
            max_steps = 3
            approval_timeout_secs = 600

            [[agents.tools]]
            name = "delete_records"
            kind = "webhook"
            url = "http://127.0.0.1:9100/tools/delete_records"
            parameters = { type = "object", properties = { table = { type = "string" } } }
            approval = 'table == "users"'
            idempotent = true
            "#,
        )
        .unwrap();
        config.resolve_defaults();
        config.validate().unwrap();
        let agents = build(&config, &(store.clone() as Arc<dyn Kv>), None, None).unwrap();
        let ops = &agents[0];
        assert_eq!(ops.rules.max_steps, 3);
        assert_eq!(ops.rules.approval_timeout, Some(Duration::from_secs(600)));
        let rules = &ops.rules.tools["delete_records"];
        assert!(rules.idempotent);
        assert!(rules
            .approval
            .requires_approval(&json!({"table": "users"}))
            .is_some());
        assert!(rules
            .approval
            .requires_approval(&json!({"table": "logs"}))
            .is_none());
        assert_eq!(
            ops.tools["delete_records"].parameters()["properties"]["table"],
            json!({"type": "string"})
        );
        store.shutdown().await;
    }
}

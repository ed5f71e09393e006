//! MCP tools as an agent's tools: the names the model sees (`{server}__{tool}`), which of a
//! server's tools an agent takes (its `kind = "mcp"` entries), and [`AgentMcp`], the agent's
//! dynamic tool source that the session actor journals (`tools_seen`) and runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use stead_actors::policy::ApprovalPolicy;
use stead_actors::tools::{tools_digest, DynamicTools, Tool, ToolContext, ToolError};
use stead_actors::{AgentRules, SeenTool};

use super::server::{McpServer, ServerTool, Status};

/// Between a server's name and its tool's in the names the model sees. OpenAI-style function
/// names allow `^[A-Za-z0-9_-]{1,64}$`; server names may not contain it.
pub const SEPARATOR: &str = "__";

/// Longest function name providers accept.
const MAX_NAME: usize = 64;

/// A character a function name may hold.
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// `{server}__{tool}` with the characters a function name may not hold as `_`, not
/// shortened: what an entry's name or glob is matched against.
fn full_name(server: &str, tool: &str) -> String {
    let tool: String = tool
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .collect();
    format!("{server}{SEPARATOR}{tool}")
}

/// Whether shortening keeps a tool's policy: the rule that would apply to its full name
/// ([`full_name`]) is the one its model-visible `name` matches (decisions look rules up by the
/// name the model called). A tool for which it is not — a strict entry naming a long tool,
/// shadowed after shortening by a broad glob — is not offered (such a tool ran with
/// the glob's `approval = "never"`).
pub fn policy_kept(rules: &AgentRules, full: &str, name: &str) -> bool {
    full == name
        || rules.dynamic_rule(full).map(|r| &r.pattern)
            == rules.dynamic_rule(name).map(|r| &r.pattern)
}

/// The name the model sees for `tool` of `server`: characters a function name may not hold
/// become `_`; a name over 64 characters is cut to 55 and ends with `_` and 8 hex digits of
/// its full form's SHA-256, so it stays unique.
pub fn model_name(server: &str, tool: &str) -> String {
    let name = full_name(server, tool);
    if name.len() <= MAX_NAME {
        return name;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(name.as_bytes());
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}_{hex}", &name[..55])
}

/// The pattern over model-visible names that an entry's tool name or glob stands for.
pub fn pattern(server: &str, glob: &str) -> String {
    let glob: String = glob
        .chars()
        .map(|c| {
            if allowed(c) || c == '*' || c == '?' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{server}{SEPARATOR}{glob}")
}

/// One MCP tool as a Stead tool.
pub struct McpTool {
    pub server: Arc<McpServer>,
    pub remote: ServerTool,
    /// The name the model sees.
    pub name: String,
    pub approval: ApprovalPolicy,
    pub idempotent: bool,
    /// The journal's `max_event_bytes`: a bigger result is cut down with a marker.
    pub max_result_bytes: usize,
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.remote.description
    }
    fn parameters(&self) -> Value {
        self.remote.input_schema.clone()
    }
    fn approval(&self) -> &ApprovalPolicy {
        &self.approval
    }
    fn idempotent(&self) -> bool {
        self.idempotent
    }
    async fn execute(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let result = self
            .server
            .call(&self.remote.name, arguments, context)
            .await?;
        Ok(super::result::fit(result, self.max_result_bytes))
    }
}

/// The tools one agent takes from its MCP servers, as the servers list them now.
pub struct AgentMcp {
    /// The servers the agent's entries name, in configuration order, without repeats.
    servers: Vec<Arc<McpServer>>,
    rules: AgentRules,
    generation: Arc<AtomicU64>,
    max_result_bytes: usize,
    cache: Mutex<Option<Offered>>,
}

/// The list at one generation of the servers' tool lists.
struct Offered {
    generation: u64,
    digest: String,
    seen: Vec<SeenTool>,
    tools: HashMap<String, Arc<McpTool>>,
}

impl AgentMcp {
    /// `rules` must hold the agent's dynamic rules (their patterns choose its tools).
    pub fn new(
        servers: Vec<Arc<McpServer>>,
        rules: AgentRules,
        generation: Arc<AtomicU64>,
        max_result_bytes: usize,
    ) -> Self {
        AgentMcp {
            servers,
            rules,
            generation,
            max_result_bytes,
            cache: Mutex::new(None),
        }
    }

    fn offered<T>(&self, read: impl FnOnce(&Offered) -> T) -> T {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        // Read the generation before the lists: a change in between rebuilds next time.
        let generation = self.generation.load(Ordering::SeqCst);
        if cache.as_ref().is_none_or(|c| c.generation != generation) {
            *cache = Some(self.build(generation));
        }
        match cache.as_ref() {
            Some(offered) => read(offered),
            None => read(&self.build(generation)),
        }
    }

    fn build(&self, generation: u64) -> Offered {
        let mut seen = Vec::new();
        let mut tools = HashMap::new();
        for server in &self.servers {
            for remote in server.tools().iter() {
                let name = model_name(server.name(), &remote.name);
                let Some(rule) = self.rules.dynamic_rule(&name) else {
                    continue;
                };
                if !policy_kept(&self.rules, &full_name(server.name(), &remote.name), &name) {
                    tracing::warn!(server = %server.name(), tool = %remote.name, %name,
                        "MCP tool left out: its shortened name would take another entry's policy \
                         than its full name; name it with a glob that matches the shortened name too");
                    continue;
                }
                if tools.contains_key(&name) {
                    continue; // two remote names that map to one: the first wins
                }
                seen.push(SeenTool {
                    name: name.clone(),
                    description: remote.description.clone(),
                    parameters: remote.input_schema.clone(),
                });
                tools.insert(
                    name.clone(),
                    Arc::new(McpTool {
                        server: server.clone(),
                        remote: remote.clone(),
                        name,
                        approval: rule.approval.clone(),
                        idempotent: rule.idempotent,
                        max_result_bytes: self.max_result_bytes,
                    }),
                );
            }
        }
        Offered {
            generation,
            digest: tools_digest(&seen),
            seen,
            tools,
        }
    }
}

impl DynamicTools for AgentMcp {
    fn seen(&self) -> (String, Vec<SeenTool>) {
        self.offered(|o| (o.digest.clone(), o.seen.clone()))
    }

    fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(tool) = self.offered(|o| o.tools.get(name).cloned()) {
            return Some(tool);
        }
        // A call recovered after a restart can come before its server is up again: it waits
        // for the server (up to its start timeout) and then finds the tool by name.
        let server = self.servers.iter().find(|s| {
            s.status() != Status::Ready
                && name
                    .strip_prefix(s.name())
                    .is_some_and(|rest| rest.starts_with(SEPARATOR))
        })?;
        let rule = self.rules.dynamic_rule(name)?;
        Some(Arc::new(Deferred {
            server: server.clone(),
            name: name.to_string(),
            approval: rule.approval.clone(),
            idempotent: rule.idempotent,
            max_result_bytes: self.max_result_bytes,
        }))
    }

    fn sources(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.name().to_string()).collect()
    }
}

/// An MCP tool whose server is not ready yet: found by name once it is.
struct Deferred {
    server: Arc<McpServer>,
    name: String,
    approval: ApprovalPolicy,
    idempotent: bool,
    max_result_bytes: usize,
}

#[async_trait]
impl Tool for Deferred {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        ""
    }
    fn parameters(&self) -> Value {
        serde_json::json!({ "type": "object" })
    }
    fn approval(&self) -> &ApprovalPolicy {
        &self.approval
    }
    fn idempotent(&self) -> bool {
        self.idempotent
    }
    async fn execute(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let deadline = tokio::time::Instant::now() + self.server.config().start_timeout;
        while self.server.status() != Status::Ready {
            if tokio::time::Instant::now() >= deadline || context.cancel.is_cancelled() {
                return Err(ToolError(format!(
                    "the MCP server `{}` is not running",
                    self.server.name()
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let remote = self
            .server
            .tools()
            .iter()
            .find(|t| model_name(self.server.name(), &t.name) == self.name)
            .cloned()
            .ok_or_else(|| {
                ToolError(format!(
                    "unknown tool `{}`: the MCP server `{}` no longer offers it",
                    self.name,
                    self.server.name()
                ))
            })?;
        let tool = McpTool {
            server: self.server.clone(),
            remote,
            name: self.name.clone(),
            approval: self.approval.clone(),
            idempotent: self.idempotent,
            max_result_bytes: self.max_result_bytes,
        };
        tool.execute(arguments, context).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_model_sees_are_valid_function_names() {
        assert_eq!(model_name("files", "read_file"), "files__read_file");
        assert_eq!(model_name("files", "read.file/v2"), "files__read_file_v2");
        let long = model_name("files", &"x".repeat(100));
        assert_eq!(long.len(), 64);
        assert!(long.starts_with("files__xxx"));
        assert_ne!(long, model_name("files", &"x".repeat(101)));
        assert_eq!(pattern("files", "list_*"), "files__list_*");
        assert_eq!(pattern("files", "a.b"), "files__a_b");
    }

    #[test]
    fn a_tool_whose_shortened_name_changes_its_policy_is_refused() {
        use stead_actors::{ApprovalPolicy, DynamicToolRule};
        let long = format!("delete_{}", "x".repeat(70));
        let rule = |pattern: String, approval| DynamicToolRule {
            pattern,
            approval,
            idempotent: false,
            approver: Default::default(),
        };
        let mut rules = AgentRules {
            route: "default".into(),
            max_steps: 8,
            tools: Default::default(),
            approval_timeout: None,
            dynamic: Vec::new(),
            message_mode: Default::default(),
            schedules: Default::default(),
            callbacks: Default::default(),
            delegation: Default::default(),
            context: Default::default(),
        };
        rules.dynamic = vec![
            rule(pattern("ops", "*"), ApprovalPolicy::Never),
            rule(pattern("ops", &long), ApprovalPolicy::Always),
        ];
        let full = full_name("ops", &long);
        let shown = model_name("ops", &long);
        assert_ne!(full, shown);
        // The strict entry matches the full name only; the model's name falls to `*`.
        assert_eq!(
            rules.dynamic_rule(&shown).unwrap().approval,
            ApprovalPolicy::Never
        );
        assert!(!policy_kept(&rules, &full, &shown));
        // Without the strict entry shortening changes nothing; a short name is always kept.
        rules.dynamic.pop();
        assert!(policy_kept(&rules, &full, &shown));
        assert!(policy_kept(&rules, "ops__list", "ops__list"));
    }
}

//! What an agent's decisions depend on: its loop rules ([`AgentRules`]), each configured
//! tool's policy, schema and approver ([`ToolRules`]), and the policies of dynamic (MCP) tools
//! matched by name or glob ([`DynamicToolRule`], the most specific wins).

use std::collections::BTreeMap;

use crate::events::SeenTool;
use crate::policy::{ApprovalPolicy, Approver, ArgumentSchema};
use crate::state::SessionState;

/// What an agent's loop needs to know about its tools.
#[derive(Debug, Clone)]
pub struct ToolRules {
    pub approval: ApprovalPolicy,
    pub idempotent: bool,
    /// Checked before anything else: invalid arguments fail the call back to the model.
    pub arguments: ArgumentSchema,
    /// Who may approve.
    pub approver: Approver,
    /// A tool the session runs itself, inside its decisions (`None`: an outside tool).
    pub builtin: Option<crate::schedule_tool::Builtin>,
}

/// The parts of an agent's configuration that decisions depend on.
#[derive(Debug, Clone)]
pub struct AgentRules {
    pub route: String,
    pub max_steps: u32,
    pub tools: BTreeMap<String, ToolRules>,
    /// An approval not decided within this time is rejected as expired (`None`: never).
    pub approval_timeout: Option<std::time::Duration>,
    /// Policies of dynamic (MCP) tools, by the names the model sees: a call of a tool in the
    /// session's journaled list (`tools_seen`) takes the most specific matching rule, and its
    /// arguments are checked against the schema that list holds.
    pub dynamic: Vec<DynamicToolRule>,
    /// What a user message that names no `mode` does while a turn runs.
    pub message_mode: crate::events::MessageMode,
    /// Limits on the session's schedules.
    pub schedules: crate::schedules::ScheduleLimits,
    /// Named prompt templates a schedule may deliver instead of a fixed text (`callback`), by
    /// name (docs/schedules.md, "Callbacks").
    pub callbacks: BTreeMap<String, String>,
    /// Limits on the child sessions that `agent` tools start.
    pub delegation: Delegation,
    /// How the session's prompts stay inside their budget (`[agents.context]`).
    pub context: crate::context::ContextRules,
}

/// Limits on delegation (`agent` tools), from `[sessions]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delegation {
    /// A session at this depth (its parent chain's length) cannot start a child
    /// (`sessions.max_delegation_depth`).
    pub max_depth: u32,
    /// The most agent calls one model answer may start; the rest fail back to the model
    /// (`sessions.max_delegation_fanout`).
    pub max_fanout: u32,
    /// The most model calls the sub-agents under one message of a top-level session — its
    /// children and all their descendants — may make together (`sessions.max_delegation_steps`).
    pub max_steps: u32,
    /// The most child sessions one message of a top-level session may start, at any depth
    /// (`sessions.max_delegation_sessions`).
    pub max_sessions: u32,
}

/// The default delegation depth: a coordinator, its children and their children.
pub const DEFAULT_MAX_DEPTH: u32 = 3;
/// The default fan-out: agent calls one model answer may start.
pub const DEFAULT_MAX_FANOUT: u32 = 8;
/// The default step limit of one top-level message's sub-agents (the whole tree).
pub const DEFAULT_MAX_DELEGATION_STEPS: u32 = 100;
/// The default limit of child sessions under one top-level message.
pub const DEFAULT_MAX_DELEGATION_SESSIONS: u32 = 32;

impl Default for Delegation {
    fn default() -> Self {
        Delegation {
            max_depth: DEFAULT_MAX_DEPTH,
            max_fanout: DEFAULT_MAX_FANOUT,
            max_steps: DEFAULT_MAX_DELEGATION_STEPS,
            max_sessions: DEFAULT_MAX_DELEGATION_SESSIONS,
        }
    }
}

/// The policy of the dynamic tools whose model-visible names match `pattern`.
#[derive(Debug, Clone)]
pub struct DynamicToolRule {
    /// A name, or a glob: `*` matches any run of characters, `?` one character.
    pub pattern: String,
    pub approval: ApprovalPolicy,
    pub idempotent: bool,
    pub approver: Approver,
}

impl AgentRules {
    /// The rules of `tool`: a configured tool's, or for a tool of the journaled dynamic list the
    /// most specific matching [`DynamicToolRule`] with the list's argument schema. `None`: the
    /// agent has no such tool.
    pub fn tool(&self, state: &SessionState, tool: &str) -> Option<ToolRules> {
        if let Some(rules) = self.tools.get(tool) {
            return Some(rules.clone());
        }
        let seen = state.seen_tool(tool)?;
        let rule = self.dynamic_rule(tool)?;
        Some(dynamic_rules(rule, seen))
    }

    /// The most specific rule whose pattern matches `name`: an exact name before any glob, then
    /// the glob with the most literal characters, then the first configured.
    pub fn dynamic_rule(&self, name: &str) -> Option<&DynamicToolRule> {
        let mut best: Option<(&DynamicToolRule, (bool, usize))> = None;
        for rule in &self.dynamic {
            if !glob_matches(&rule.pattern, name) {
                continue;
            }
            let rank = glob_specificity(&rule.pattern);
            if best.is_none_or(|(_, b)| rank > b) {
                best = Some((rule, rank));
            }
        }
        best.map(|(rule, _)| rule)
    }
}

fn dynamic_rules(rule: &DynamicToolRule, seen: &SeenTool) -> ToolRules {
    ToolRules {
        approval: rule.approval.clone(),
        idempotent: rule.idempotent,
        // The registry only offers tools whose schema compiles; an old record's that does not
        // checks nothing rather than refusing every call.
        arguments: ArgumentSchema::compile(&seen.parameters).unwrap_or_default(),
        approver: rule.approver,
        builtin: None,
    }
}

/// `(exact, literal characters)`: larger is more specific.
pub fn glob_specificity(pattern: &str) -> (bool, usize) {
    let literals = pattern.chars().filter(|c| !matches!(c, '*' | '?')).count();
    (literals == pattern.chars().count(), literals)
}

/// Whether `name` matches `pattern` (`*`: any run of characters, `?`: one character).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

//! The delegation scenario of the sub-agent tests: a coordinator (`lead`) whose one answer
//! delegates to two child agents at once — `researcher` answers at once, `writer` calls a tool
//! that needs a person's approval — and then reports both replies. Shared by the actor tests
//! (both backends), the HTTP tests and the crash trials.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use stead_actors::agent_tool::AgentTool;
use stead_actors::schedule_tool::Builtin;
use stead_actors::session::Agent;
use stead_actors::tools::{ClockTool, Tool, ToolInfo};
use stead_actors::{AgentRules, ApprovalPolicy, ArgumentSchema, ToolRules, TranscriptEntry};

use crate::model::ScriptedModel;

pub const LEAD_PROMPT: &str = "You coordinate.";
pub const RESEARCHER_PROMPT: &str = "You research.";
pub const WRITER_PROMPT: &str = "You write.";
/// The researcher's reply.
pub const FINDINGS: &str = "Findings: Rayleigh scattering.";
/// The writer's reply once its clock call came back.
pub const DRAFT: &str = "Draft written.";

fn agent(name: &str, prompt: &str) -> Agent {
    Agent {
        name: name.into(),
        system_prompt: prompt.into(),
        rules: AgentRules {
            route: "default".into(),
            max_steps: 4,
            tools: BTreeMap::new(),
            approval_timeout: None,
            dynamic: Vec::new(),
            message_mode: Default::default(),
            schedules: Default::default(),
            callbacks: Default::default(),
            delegation: Default::default(),
            context: Default::default(),
        },
        tools: Default::default(),
        dynamic: None,
        guardrails: None,
    }
}

fn add(agent: &mut Agent, tool: Arc<dyn Tool>, approval: ApprovalPolicy, builtin: Option<Builtin>) {
    let name = tool.name().to_string();
    agent.rules.tools.insert(
        name.clone(),
        ToolRules {
            approval,
            idempotent: true,
            arguments: ArgumentSchema::compile(&tool.parameters()).unwrap(),
            approver: Default::default(),
            builtin,
        },
    );
    agent.tools.insert(name, tool);
}

fn delegate(lead: &mut Agent, name: &str, child: &str) {
    let tool = AgentTool {
        info: ToolInfo {
            name: name.into(),
            description: format!("Ask the {child}"),
            approval: ApprovalPolicy::Never,
            idempotent: true,
        },
        agent: child.into(),
        parameters: AgentTool::default_parameters(),
    };
    let builtin = Builtin::Agent {
        agent: child.into(),
    };
    add(lead, Arc::new(tool), ApprovalPolicy::Never, Some(builtin));
}

/// `lead` (tools `research` → `researcher`, `write` → `writer`), `researcher` (no tools) and
/// `writer` (a `clock` that always needs approval).
pub fn agents() -> Vec<Agent> {
    let mut lead = agent("lead", LEAD_PROMPT);
    delegate(&mut lead, "research", "researcher");
    delegate(&mut lead, "write", "writer");
    let researcher = agent("researcher", RESEARCHER_PROMPT);
    let mut writer = agent("writer", WRITER_PROMPT);
    let clock = ClockTool {
        info: ToolInfo {
            name: "clock".into(),
            description: "The time".into(),
            approval: ApprovalPolicy::Always,
            idempotent: true,
        },
    };
    add(&mut writer, Arc::new(clock), ApprovalPolicy::Always, None);
    vec![lead, researcher, writer]
}

/// The lead's final answer, given its children's replies.
pub fn lead_answer(research: &str, writing: &str) -> String {
    format!("Research: {research} Writing: {writing}")
}

/// The three agents' model: the lead asks both children in one answer and reports their
/// replies once both came back; the researcher answers; the writer asks for the time first.
pub fn model() -> ScriptedModel {
    ScriptedModel::respond(|request| {
        // This turn's results: the entries after the last user message.
        let turn = request
            .transcript
            .iter()
            .rposition(|e| matches!(e, TranscriptEntry::User { .. }))
            .map_or(0, |at| at + 1);
        let results: BTreeMap<String, serde_json::Value> = request
            .transcript
            .iter()
            .skip(turn)
            .filter_map(|e| match e {
                TranscriptEntry::Tool { tool, content, .. } => {
                    Some((tool.clone(), content.clone()))
                }
                _ => None,
            })
            .collect();
        let reply = |tool: &str| {
            results.get(tool).map(|c| match c["reply"].as_str() {
                Some(reply) => reply.to_string(),
                None => c.to_string(),
            })
        };
        match request.system_prompt.as_str() {
            RESEARCHER_PROMPT => (FINDINGS.into(), vec![]),
            WRITER_PROMPT if results.is_empty() => {
                (String::new(), vec![("clock".into(), json!({}))])
            }
            WRITER_PROMPT => (DRAFT.into(), vec![]),
            _ => match (reply("research"), reply("write")) {
                (Some(research), Some(writing)) => (lead_answer(&research, &writing), vec![]),
                _ => (
                    String::new(),
                    vec![
                        ("research".into(), json!({"task": "Why is the sky blue?"})),
                        ("write".into(), json!({"task": "A line about the sky."})),
                    ],
                ),
            },
        }
    })
}

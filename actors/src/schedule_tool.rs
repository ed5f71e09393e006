//! The built-in `schedule` tool (docs/schedules.md, "The agent's schedule tool"): the model
//! creates, lists and cancels its own session's schedules. The session runs the tool itself,
//! inside a decision ([`Input::RunBuiltin`](crate::decide::Input::RunBuiltin)): the schedule
//! events a call causes and its result are journaled in one append, so a call never
//! half-happens, and a call that was started when the process stopped simply runs again. Its
//! calls go through the agent's approval policy like any tool's; which operations and timings
//! a tool entry offers is configured (`ops`, `timings`), so an agent can have a free
//! `remind_me` for one-time reminders and an approval-gated tool for recurring ones.

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use crate::schedules::MAX_KEY_CHARS;
use crate::tools::{Tool, ToolContext, ToolError, ToolInfo};

/// A tool the session runs inside its own decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Builtin {
    Schedule(ScheduleToolRules),
    /// Starts a child session of this agent (`crate::agent_tool`).
    Agent {
        agent: String,
    },
    /// Edits the session's pinned memory block (`crate::memory_block`).
    Memory {
        max_chars: usize,
        /// A subset of [`crate::memory_block::OPS`]: what this entry may do.
        ops: Vec<String>,
    },
}

/// What one `schedule` tool entry offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleToolRules {
    /// A subset of [`ScheduleTool::OPS`].
    pub ops: Vec<String>,
    /// A subset of [`ScheduleTool::TIMINGS`]: the kinds of schedule `create` may make.
    pub timings: Vec<String>,
}

impl Default for ScheduleToolRules {
    fn default() -> Self {
        ScheduleToolRules {
            ops: ScheduleTool::OPS.iter().map(|s| s.to_string()).collect(),
            timings: ScheduleTool::TIMINGS
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

/// The `schedule` tool as the model sees it. Its [`Tool::execute`] is never called: the
/// session runs its calls (see the module documentation).
pub struct ScheduleTool {
    pub info: ToolInfo,
    pub rules: ScheduleToolRules,
}

impl ScheduleTool {
    pub const OPS: [&'static str; 3] = ["create", "list", "cancel"];
    pub const TIMINGS: [&'static str; 4] = ["at", "delay", "cron", "every"];
}

#[async_trait]
impl Tool for ScheduleTool {
    // A call journals its effect and its result together: running it again after a crash is
    // always safe.
    crate::tool_info_accessors!(idempotent = true);

    fn builtin(&self) -> Option<Builtin> {
        Some(Builtin::Schedule(self.rules.clone()))
    }

    fn parameters(&self) -> Value {
        let offers = |timing: &str| self.rules.timings.iter().any(|t| t == timing);
        let mut properties = Map::new();
        properties.insert(
            "op".into(),
            json!({ "type": "string", "enum": self.rules.ops }),
        );
        properties.insert(
            "key".into(),
            json!({
                "type": "string",
                "pattern": format!("^[A-Za-z0-9_.-]{{1,{MAX_KEY_CHARS}}}$"),
                "description": "the schedule's name in this session (create, cancel); creating \
                                a key again with the same definition changes nothing"
            }),
        );
        if self.rules.ops.iter().any(|o| o == "create") {
            properties.insert(
                "text".into(),
                json!({
                    "type": "string",
                    "maxLength": 2000,
                    "description": "the message this session receives each time it fires (create)"
                }),
            );
            if offers("at") {
                properties.insert(
                    "at".into(),
                    json!({
                        "type": "string",
                        "description": "fire once at this RFC 3339 instant, \
                                        e.g. 2026-12-04T09:00:00Z"
                    }),
                );
            }
            if offers("delay") {
                properties.insert(
                    "delay_secs".into(),
                    json!({ "type": "integer", "minimum": 0,
                            "description": "fire once, this many seconds from now" }),
                );
            }
            if offers("cron") {
                properties.insert(
                    "cron".into(),
                    json!({
                        "type": "string",
                        "description": "fire on this 5-field cron (minute hour day month \
                                        weekday), e.g. \"0 9 * * 1-5\""
                    }),
                );
                properties.insert(
                    "tz".into(),
                    json!({ "type": "string",
                            "description": "the cron's IANA time zone (default UTC)" }),
                );
            }
            if offers("every") {
                properties.insert(
                    "every_secs".into(),
                    json!({ "type": "integer", "minimum": 1,
                            "description": "fire every this many seconds" }),
                );
            }
            properties.insert(
                "catch_up".into(),
                json!({ "type": "string", "enum": ["one", "all", "skip"] }),
            );
            properties.insert(
                "replace".into(),
                json!({ "type": "boolean",
                        "description": "redefine the key's schedule if it differs" }),
            );
        }
        json!({
            "type": "object",
            "properties": properties,
            "required": ["op"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, _arguments: Value, _context: &ToolContext) -> Result<Value, ToolError> {
        Err(ToolError(
            "the schedule tool runs inside its session, not as an outside call".into(),
        ))
    }
}

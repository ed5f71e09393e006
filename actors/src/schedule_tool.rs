//! The built-in `schedule` tool (docs/schedules.md, "The agent's schedule tool"): the model
//! creates, lists and cancels its own session's schedules. The session runs the tool itself,
//! inside a decision ([`Input::RunBuiltin`](crate::decide::Input::RunBuiltin)): the schedule
//! events a call causes and its result are journaled in one append, so a call never
//! half-happens, and a call that was started when the process stopped simply runs again. Its
//! calls go through the agent's approval policy like any tool's; which operations and timings
//! a tool entry offers is configured (`ops`, `timings`), so an agent can have a free
//! `remind_me` for one-time reminders and an approval-gated tool for recurring ones.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use crate::decide::{Planner, Refusal};
use crate::events::SessionEvent;
use crate::schedules::{schedule_view, CatchUp, ScheduleDef, ScheduleMessage, MAX_KEY_CHARS};
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

/// A refusal of a schedule operation, as the tool's error that the model reads.
fn refused(refusal: Refusal, key: &str) -> String {
    match refusal {
        Refusal::InvalidSchedule(why) => format!("invalid schedule: {why}"),
        Refusal::ScheduleConflict => format!(
            "another schedule holds the key `{key}`; pass \"replace\": true to redefine it, \
             or choose another key"
        ),
        Refusal::TooManySchedules(max) => {
            format!("this session holds {max} pending schedules, the most it may; cancel one first")
        }
        Refusal::NoSuchSchedule => format!("this session has no schedule `{key}`"),
        other => format!("refused: {other:?}"),
    }
}

impl Planner<'_> {
    /// Runs the built-in call `call_id` (started, of a built-in tool) at `now`: the schedule
    /// events it causes, then its `tool_call_finished` — or `tool_call_failed` with the reason
    /// the model reads.
    pub(crate) fn run_builtin(
        &mut self,
        call_id: String,
        now: DateTime<Utc>,
    ) -> Result<(), Refusal> {
        let tool = self.started_call(&call_id)?;
        let arguments = self
            .state
            .turn
            .as_ref()
            .and_then(|t| t.call(&call_id))
            .map(|c| c.arguments.clone())
            .unwrap_or_default();
        let rules = match self.agent.tool(&self.state, &tool).and_then(|r| r.builtin) {
            Some(Builtin::Schedule(rules)) => rules,
            Some(Builtin::Memory { max_chars, ops }) => {
                return self.run_memory(call_id, tool, &arguments, max_chars, &ops)
            }
            _ => return Err(Refusal::Stale),
        };
        let event = match self.schedule_op(&rules, &arguments, now) {
            Ok(result) => SessionEvent::ToolCallFinished {
                call_id,
                tool,
                result,
            },
            Err(ToolError(error)) => SessionEvent::ToolCallFailed {
                call_id,
                tool,
                error,
                in_doubt: false,
            },
        };
        self.push(event);
        Ok(())
    }

    fn schedule_op(
        &mut self,
        rules: &ScheduleToolRules,
        arguments: &Value,
        now: DateTime<Utc>,
    ) -> Result<Value, ToolError> {
        let op = arguments["op"].as_str().unwrap_or_default();
        if !rules.ops.iter().any(|o| o == op) {
            return Err(ToolError(format!(
                "unknown op `{op}` (this tool offers: {})",
                rules.ops.join(", ")
            )));
        }
        let key = arguments["key"].as_str().unwrap_or_default().to_string();
        if op == "list" {
            let schedules: Vec<Value> = self
                .state
                .schedules
                .iter()
                .map(|(key, s)| schedule_view(key, s))
                .collect();
            return Ok(json!({ "schedules": schedules }));
        }
        if key.is_empty() {
            return Err(ToolError(format!("`key` is required for `{op}`")));
        }
        if op == "cancel" {
            self.cancel_schedule(key.clone(), "cancelled by the agent".into())
                .map_err(|r| ToolError(refused(r, &key)))?;
            return Ok(json!({ "key": key, "cancelled": true }));
        }
        let def = definition(arguments)?;
        def.timing()
            .map_err(|e| ToolError(format!("invalid schedule: {e}")))?;
        if !rules.timings.iter().any(|t| t == def.kind()) {
            return Err(ToolError(format!(
                "this tool makes {} schedules only, not `{}`",
                rules.timings.join(", "),
                def.kind()
            )));
        }
        let replace = arguments["replace"].as_bool().unwrap_or(false);
        let created = match self.create_schedule(key.clone(), def, replace, now) {
            Ok(()) => true,
            Err(Refusal::ScheduleExists) => false,
            Err(refusal) => return Err(ToolError(refused(refusal, &key))),
        };
        let schedule = self
            .state
            .schedules
            .get(&key)
            .map(|s| schedule_view(&key, s))
            .unwrap_or_default();
        Ok(json!({ "created": created, "schedule": schedule }))
    }
}

/// The definition a `create` call's arguments give.
fn definition(arguments: &Value) -> Result<ScheduleDef, ToolError> {
    let text = arguments["text"].as_str().unwrap_or_default();
    if text.trim().is_empty() {
        return Err(ToolError(
            "`text` (the message to receive when it fires) is required for `create`".into(),
        ));
    }
    let at = match arguments.get("at").and_then(Value::as_str) {
        Some(at) => Some(
            DateTime::parse_from_rfc3339(at)
                .map_err(|_| ToolError(format!("`at` is not an RFC 3339 instant: {at}")))?
                .with_timezone(&Utc),
        ),
        None => None,
    };
    let catch_up: CatchUp = match arguments.get("catch_up") {
        Some(value) => serde_json::from_value(value.clone())
            .map_err(|_| ToolError("`catch_up` is one of one, all and skip".into()))?,
        None => CatchUp::default(),
    };
    Ok(ScheduleDef {
        at,
        delay_secs: arguments.get("delay_secs").and_then(Value::as_u64),
        cron: arguments
            .get("cron")
            .and_then(Value::as_str)
            .map(str::to_string),
        tz: arguments
            .get("tz")
            .and_then(Value::as_str)
            .map(str::to_string),
        every_secs: arguments.get("every_secs").and_then(Value::as_u64),
        message: ScheduleMessage::text(text),
        catch_up,
    })
}

//! The built-in calls that run inside a decision — the schedule tool, and through it the memory
//! block — with their events and result journaled together.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::decide::{Planner, Refusal};
use crate::events::SessionEvent;
use crate::schedule_tool::*;
use crate::schedules::{schedule_view, CatchUp, ScheduleDef, ScheduleMessage};
use crate::tools::ToolError;
use stead_model::CallId;

impl Planner<'_> {
    /// Runs the built-in call `call_id` (started, of a built-in tool) at `now`: the schedule
    /// events it causes, then its `tool_call_finished` — or `tool_call_failed` with the reason
    /// the model reads.
    pub(crate) fn run_builtin(
        &mut self,
        call_id: CallId,
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

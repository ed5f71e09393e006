//! The pinned memory block (docs/sessions.md, "Memory block"): a few lines of text the agent
//! keeps with its built-in `memory_block` tool, shown after the system prompt in every model
//! call and never compacted, so facts the user asks it to keep outlive any summary. A call
//! runs inside its decision, like the `schedule` tool: the block's new text is journaled as
//! `memory_updated` together with the call's result, so replay rebuilds it exactly.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::decide::{Planner, Refusal};
use crate::events::SessionEvent;
use crate::policy::ApprovalPolicy;
use crate::schedule_tool::Builtin;
use crate::tools::{Tool, ToolContext, ToolError, ToolInfo};

/// A block's size limit when its tool names none.
pub const DEFAULT_MAX_CHARS: usize = 2_000;

/// The `memory_block` tool: `append` a line, `replace` the line holding some text, or
/// `remove` it.
pub struct MemoryBlockTool {
    pub info: ToolInfo,
    /// The most characters the block may hold.
    pub max_chars: usize,
}

#[async_trait]
impl Tool for MemoryBlockTool {
    fn name(&self) -> &str {
        &self.info.name
    }
    fn description(&self) -> &str {
        &self.info.description
    }
    fn approval(&self) -> &ApprovalPolicy {
        &self.info.approval
    }
    fn idempotent(&self) -> bool {
        // Its effect is journaled with its result: re-running after a crash is safe.
        true
    }
    fn builtin(&self) -> Option<Builtin> {
        Some(Builtin::Memory {
            max_chars: self.max_chars,
        })
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "op": { "type": "string", "enum": ["append", "replace", "remove"] },
                "text": { "type": "string", "maxLength": 500,
                          "description": "append: the line to add; replace: the new line" },
                "old": { "type": "string", "maxLength": 200,
                         "description": "replace and remove: text of the line to change" }
            },
            "required": ["op"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, _arguments: Value, _context: &ToolContext) -> Result<Value, ToolError> {
        Err(ToolError(
            "the memory block tool runs inside its session, not as an outside call".into(),
        ))
    }
}

/// The block after one operation, or why the operation cannot be done (the call's error).
pub fn apply(block: &str, arguments: &Value, max_chars: usize) -> Result<String, String> {
    let text = arguments["text"].as_str().unwrap_or_default().trim();
    let old = arguments["old"].as_str().unwrap_or_default().trim();
    let mut lines: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    let find = |lines: &[&str]| {
        if old.is_empty() {
            return Err("`old` names the line to change".to_string());
        }
        lines
            .iter()
            .position(|l| l.contains(old))
            .ok_or_else(|| format!("no line of the memory block contains {old:?}"))
    };
    match arguments["op"].as_str().unwrap_or_default() {
        "append" if text.is_empty() => return Err("`text` is the line to append".into()),
        "append" => lines.push(text),
        "replace" if text.is_empty() => return Err("`text` is the new line".into()),
        "replace" => {
            let at = find(&lines)?;
            lines[at] = text;
        }
        "remove" => {
            let at = find(&lines)?;
            lines.remove(at);
        }
        other => return Err(format!("unknown op {other:?}: append, replace or remove")),
    }
    let next = lines.join("\n");
    let chars = next.chars().count();
    if chars > max_chars {
        return Err(format!(
            "the memory block would hold {chars} characters, more than its {max_chars}: \
             replace or remove lines first"
        ));
    }
    Ok(next)
}

impl Planner<'_> {
    /// Runs the started call `call_id` of a memory block tool: `memory_updated` and the call's
    /// result, or the call's error.
    pub(crate) fn run_memory(
        &mut self,
        call_id: String,
        tool: String,
        arguments: &Value,
        max_chars: usize,
    ) -> Result<(), Refusal> {
        match apply(&self.state.memory, arguments, max_chars) {
            Ok(text) => {
                self.push(SessionEvent::MemoryUpdated {
                    text: text.clone(),
                    by: format!("agent:{call_id}"),
                });
                self.push(SessionEvent::ToolCallFinished {
                    call_id,
                    tool,
                    result: json!({ "memory": text }),
                });
            }
            Err(error) => self.push(SessionEvent::ToolCallFailed {
                call_id,
                tool,
                error,
                in_doubt: false,
            }),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_appended_replaced_and_removed_within_the_limit() {
        let block = apply(
            "",
            &json!({"op": "append", "text": "Dentist: Friday 3pm"}),
            100,
        )
        .unwrap();
        let block = apply(
            &block,
            &json!({"op": "append", "text": "Wifi: swordfish"}),
            100,
        )
        .unwrap();
        assert_eq!(block, "Dentist: Friday 3pm\nWifi: swordfish");
        let block = apply(
            &block,
            &json!({"op": "replace", "old": "Dentist", "text": "Dentist: Monday 9am"}),
            100,
        )
        .unwrap();
        assert_eq!(block, "Dentist: Monday 9am\nWifi: swordfish");
        let block = apply(&block, &json!({"op": "remove", "old": "Wifi"}), 100).unwrap();
        assert_eq!(block, "Dentist: Monday 9am");
        assert!(apply(&block, &json!({"op": "remove", "old": "cat"}), 100)
            .unwrap_err()
            .contains("no line"));
        assert!(apply(
            &block,
            &json!({"op": "append", "text": "x".repeat(90)}),
            100
        )
        .unwrap_err()
        .contains("more than its 100"));
        assert!(apply(&block, &json!({"op": "wipe"}), 100).is_err());
    }
}

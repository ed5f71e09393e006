//! The pinned memory block (docs/sessions.md, "Memory block"): a few lines of text the agent
//! keeps with its built-in `memory_block` tool, shown after the system prompt in every model
//! call and never compacted, so facts the user asks it to keep outlive any summary. A call
//! runs inside its decision, like the `schedule` tool: the block's new text is journaled as
//! `memory_updated` together with the call's result, so replay rebuilds it exactly.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::schedule_tool::Builtin;
use crate::tools::{Tool, ToolContext, ToolError, ToolInfo};

/// A block's size limit when its tool names none.
pub const DEFAULT_MAX_CHARS: usize = 2_000;

/// What a `memory_block` tool can do; an entry's `ops` offers a subset (all by default), so
/// that one agent can keep an `append` tool that needs no approval next to a `remove` tool
/// that does.
pub const OPS: [&str; 3] = ["append", "replace", "remove"];

/// The `memory_block` tool: `append` a line, `replace` the line holding some text, or
/// `remove` it.
pub struct MemoryBlockTool {
    pub info: ToolInfo,
    /// The most characters the block may hold.
    pub max_chars: usize,
    /// The operations it offers, a subset of [`OPS`].
    pub ops: Vec<String>,
}

impl MemoryBlockTool {
    /// A tool offering every operation.
    pub fn all_ops(info: ToolInfo, max_chars: usize) -> MemoryBlockTool {
        MemoryBlockTool {
            info,
            max_chars,
            ops: OPS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

#[async_trait]
impl Tool for MemoryBlockTool {
    // Its effect is journaled with its result: re-running after a crash is safe.
    crate::tool_info_accessors!(idempotent = true);
    fn builtin(&self) -> Option<Builtin> {
        Some(Builtin::Memory {
            max_chars: self.max_chars,
            ops: self.ops.clone(),
        })
    }
    /// Only the fields its operations use (a small model fills every field it is shown).
    fn parameters(&self) -> Value {
        let offers = |op: &str| self.ops.iter().any(|o| o == op);
        let mut properties = serde_json::Map::new();
        properties.insert("op".into(), json!({ "type": "string", "enum": self.ops }));
        if offers("append") || offers("replace") {
            let said = match (offers("append"), offers("replace")) {
                (true, true) => "append: the line to add; replace: the new line",
                (true, false) => "the note to save, in the user's words",
                _ => "the new line",
            };
            properties.insert(
                "text".into(),
                json!({ "type": "string", "maxLength": 500, "description": said }),
            );
        }
        if offers("replace") || offers("remove") {
            properties.insert(
                "old".into(),
                json!({ "type": "string", "maxLength": 200,
                        "description": "text of the line to change or remove" }),
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
            "the memory block tool runs inside its session, not as an outside call".into(),
        ))
    }
}

/// Whether two lines say the same, ignoring case, surrounding space and closing punctuation
/// ("My locker code is 4512." and "my locker code is 4512").
fn same_line(a: &str, b: &str) -> bool {
    let key = |l: &str| {
        l.trim()
            .trim_end_matches(['.', '!', ',', ';'])
            .trim()
            .to_lowercase()
    };
    key(a) == key(b)
}

/// The block after one operation and what changed (the call's result: `{"saved": line}`,
/// `{"replaced": old, "with": line}` or `{"deleted": line}`), or why the operation cannot be
/// done (the call's error).
pub fn apply(
    block: &str,
    arguments: &Value,
    max_chars: usize,
) -> Result<(String, Value), ToolError> {
    let text = arguments["text"].as_str().unwrap_or_default().trim();
    let old = arguments["old"].as_str().unwrap_or_default().trim();
    let mut lines: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    let find = |lines: &[&str]| {
        if old.is_empty() {
            return Err(ToolError("`old` names the line to change".into()));
        }
        let old = old.to_lowercase();
        lines
            .iter()
            .position(|l| l.to_lowercase().contains(&old))
            .ok_or_else(|| ToolError(format!("no line of the memory block contains {old:?}")))
    };
    let change = match arguments["op"].as_str().unwrap_or_default() {
        "append" if text.is_empty() => {
            return Err(ToolError("`text` is the line to append".into()))
        }
        "append" => {
            // Saving a line the block holds already changes nothing (a small model asked to
            // list its notes saves them again).
            if !lines.iter().any(|l| same_line(l, text)) {
                lines.push(text);
            }
            json!({ "saved": text })
        }
        "replace" if text.is_empty() => return Err(ToolError("`text` is the new line".into())),
        "replace" => {
            let at = find(&lines)?;
            let change = json!({ "replaced": lines[at], "with": text });
            lines[at] = text;
            change
        }
        "remove" => {
            let at = find(&lines)?;
            json!({ "deleted": lines.remove(at) })
        }
        other => {
            return Err(ToolError(format!(
                "unknown op {other:?}: append, replace or remove"
            )))
        }
    };
    let next = lines.join("\n");
    let chars = next.chars().count();
    if chars > max_chars {
        return Err(ToolError(format!(
            "the memory block would hold {chars} characters, more than its {max_chars}: \
             replace or remove lines first"
        )));
    }
    Ok((next, change))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_appended_replaced_and_removed_within_the_limit() {
        let (block, saved) = apply(
            "",
            &json!({"op": "append", "text": "Dentist: Friday 3pm"}),
            100,
        )
        .unwrap();
        assert_eq!(saved, json!({"saved": "Dentist: Friday 3pm"}));
        let (block, _) = apply(
            &block,
            &json!({"op": "append", "text": "Wifi: swordfish"}),
            100,
        )
        .unwrap();
        assert_eq!(block, "Dentist: Friday 3pm\nWifi: swordfish");
        // Saved again: nothing changes.
        let (again, _) = apply(
            &block,
            &json!({"op": "append", "text": "wifi: SWORDFISH."}),
            100,
        )
        .unwrap();
        assert_eq!(again, block);
        let (block, replaced) = apply(
            &block,
            &json!({"op": "replace", "old": "dentist", "text": "Dentist: Monday 9am"}),
            100,
        )
        .unwrap();
        assert_eq!(block, "Dentist: Monday 9am\nWifi: swordfish");
        assert_eq!(
            replaced,
            json!({"replaced": "Dentist: Friday 3pm", "with": "Dentist: Monday 9am"})
        );
        let (block, deleted) = apply(&block, &json!({"op": "remove", "old": "WIFI"}), 100).unwrap();
        assert_eq!(block, "Dentist: Monday 9am");
        assert_eq!(deleted, json!({"deleted": "Wifi: swordfish"}));
        assert!(apply(&block, &json!({"op": "remove", "old": "cat"}), 100)
            .unwrap_err()
            .0
            .contains("no line"));
        assert!(apply(
            &block,
            &json!({"op": "append", "text": "x".repeat(90)}),
            100
        )
        .unwrap_err()
        .0
        .contains("more than its 100"));
        assert!(apply(&block, &json!({"op": "wipe"}), 100).is_err());
    }

    #[test]
    fn the_schema_shows_only_what_the_offered_ops_use() {
        let info = ToolInfo {
            name: "forget".into(),
            description: "Delete a line".into(),
            approval: crate::policy::ApprovalPolicy::Always,
            idempotent: true,
        };
        let remove = MemoryBlockTool {
            ops: vec!["remove".into()],
            ..MemoryBlockTool::all_ops(info.clone(), 100)
        };
        let keys = |tool: &MemoryBlockTool| {
            let schema = tool.parameters();
            let mut keys: Vec<String> = schema["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            keys.sort();
            keys
        };
        assert_eq!(keys(&remove), ["old", "op"]);
        assert_eq!(
            remove.parameters()["properties"]["op"]["enum"],
            json!(["remove"])
        );
        let append = MemoryBlockTool {
            ops: vec!["append".into()],
            ..MemoryBlockTool::all_ops(info.clone(), 100)
        };
        assert_eq!(keys(&append), ["op", "text"]);
        assert_eq!(
            keys(&MemoryBlockTool::all_ops(info, 100)),
            ["old", "op", "text"]
        );
    }
}

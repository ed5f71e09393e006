//! The memory block tool's calls, run inside their decision.

use crate::decide::{Planner, Refusal};
use crate::events::SessionEvent;
use crate::memory_block::*;
use crate::tools::ToolError;
use serde_json::Value;
use stead_model::CallId;

impl Planner<'_> {
    /// Runs the started call `call_id` of a memory block tool: `memory_updated` and the call's
    /// result, or the call's error.
    pub(crate) fn run_memory(
        &mut self,
        call_id: CallId,
        tool: String,
        arguments: &Value,
        max_chars: usize,
        ops: &[String],
    ) -> Result<(), Refusal> {
        let op = arguments["op"].as_str().unwrap_or_default();
        let outcome = if ops.iter().any(|o| o == op) {
            apply(&self.state.memory, arguments, max_chars)
        } else {
            Err(ToolError(format!(
                "`{tool}` does not offer op {op:?}; it offers {}",
                ops.join(", ")
            )))
        };
        match outcome {
            Ok((text, change)) => {
                self.push(SessionEvent::MemoryUpdated {
                    text,
                    by: format!("agent:{call_id}"),
                });
                self.push(SessionEvent::ToolCallFinished {
                    call_id,
                    tool,
                    result: change,
                });
            }
            Err(ToolError(error)) => self.push(SessionEvent::ToolCallFailed {
                call_id,
                tool,
                error,
                in_doubt: false,
            }),
        }
        Ok(())
    }
}

//! The turn's reply: checked, repaired, or built from its tool results.

use crate::decide::Planner;
use crate::events::{SessionEvent, TurnEnd};
use crate::reply::*;
use crate::state::TranscriptEntry;
use serde_json::Value;
use stead_model::CallId;

impl Planner<'_> {
    /// The model answered `call_id` without tool calls: its text ends the turn when a person
    /// can read it as a reply. Otherwise it is rejected (`reply_rejected`) and the turn either
    /// makes a repair call (`advance` starts it: no tools, an instruction to answer) or, once
    /// the repairs or the steps are spent, ends with a reply built from its tool results
    /// (docs/sessions.md, "Replies").
    pub(crate) fn reply(&mut self, call_id: CallId, text: String) {
        let results = self.turn_results();
        let problem = {
            let tools = self.tool_names();
            let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
            let values: Vec<&Value> = results.iter().map(|(_, v)| v).collect();
            problem(&text, &tools, &values)
        };
        let Some(reason) = problem else {
            self.push(SessionEvent::AssistantMessage {
                text,
                fallback: false,
            });
            self.push(SessionEvent::TurnFinished {
                reason: TurnEnd::Completed,
            });
            return;
        };
        self.push(SessionEvent::ReplyRejected {
            call_id,
            reason: reason.to_string(),
        });
        let turn = self.state.turn.as_ref();
        let repairs_spent = turn.is_some_and(|t| t.rejected_replies > MAX_REPAIRS);
        let steps_spent = turn.is_some_and(|t| t.model_calls >= self.agent.max_steps);
        if repairs_spent || steps_spent {
            let named: Vec<(&str, &Value)> = results.iter().map(|(t, v)| (t.as_str(), v)).collect();
            self.push(SessionEvent::AssistantMessage {
                text: built(&named),
                fallback: true,
            });
            self.push(SessionEvent::TurnFinished {
                reason: TurnEnd::Completed,
            });
        }
    }

    /// The tool results of the turn so far (since its latest user message), in order.
    fn turn_results(&self) -> Vec<(String, Value)> {
        // From the end back to the user message: the turn's own entries only (a persistent
        // vector's iterator skips forward one entry at a time).
        let mut results: Vec<(String, Value)> = self
            .state
            .transcript
            .iter()
            .rev()
            .take_while(|e| !matches!(e, TranscriptEntry::User { .. }))
            .filter_map(|e| match e {
                TranscriptEntry::Tool { tool, content, .. } => {
                    Some((tool.clone(), content.clone()))
                }
                _ => None,
            })
            .collect();
        results.reverse();
        results
    }

    /// The names of every tool the model is offered: the agent's and the journaled dynamic ones.
    fn tool_names(&self) -> Vec<String> {
        self.agent
            .tools
            .keys()
            .cloned()
            .chain(self.state.seen_tools.iter().map(|t| t.name.clone()))
            .collect()
    }
}

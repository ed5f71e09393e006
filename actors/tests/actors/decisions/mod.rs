//! The agent loop's decisions and the fold, with no database, model or tool: each test drives
//! a session through inputs and checks the journaled events and the actions. By topic: turns,
//! tools and approvals (`turns`); recovery, refusals and the end of a session (`recovery`).

mod budgets;
mod children;
mod context;
mod dynamic;
mod guardrails;
mod memory_block;
mod modes;
mod recovery;
mod replies;
mod schedule_limits;
mod schedule_pruning;
mod schedule_tool;
mod schedules;
mod turns;

use std::collections::BTreeMap;

use serde_json::{json, Value};
use stead_actors::{
    decide, Action, AgentRules, ApprovalPolicy, ApprovalScope, CallStatus, Input, ModelOutput,
    Refusal, SessionEvent, SessionState, ToolRules,
};

struct Session {
    state: SessionState,
    journal: Vec<SessionEvent>,
    agent: AgentRules,
}

impl Session {
    fn new() -> Self {
        let mut tools = BTreeMap::new();
        tools.insert(
            "clock".to_string(),
            ToolRules {
                approval: ApprovalPolicy::Never,
                idempotent: true,
                arguments: Default::default(),
                approver: Default::default(),
                builtin: None,
            },
        );
        tools.insert(
            "delete_records".to_string(),
            ToolRules {
                approval: ApprovalPolicy::Always,
                idempotent: true,
                arguments: Default::default(),
                approver: Default::default(),
                builtin: None,
            },
        );
        tools.insert(
            "charge_card".to_string(),
            ToolRules {
                approval: ApprovalPolicy::Never,
                idempotent: false,
                arguments: Default::default(),
                approver: Default::default(),
                builtin: None,
            },
        );
        tools.insert(
            "drop_table".to_string(),
            ToolRules {
                approval: ApprovalPolicy::parse(r#"table == "users""#).unwrap(),
                idempotent: true,
                arguments: Default::default(),
                approver: Default::default(),
                builtin: None,
            },
        );
        // A payment: its arguments are checked against a schema, and only an operator may
        // approve it.
        tools.insert(
            "pay".to_string(),
            ToolRules {
                approval: ApprovalPolicy::Always,
                idempotent: false,
                arguments: stead_actors::ArgumentSchema::compile(&json!({
                    "type": "object",
                    "properties": { "amount": { "type": "number" }, "to": { "type": "string" } },
                    "required": ["amount", "to"],
                    "additionalProperties": false
                }))
                .unwrap(),
                approver: stead_actors::Approver::Operator,
                builtin: None,
            },
        );
        let mut s = Session {
            state: SessionState::default(),
            journal: Vec::new(),
            agent: AgentRules {
                route: "default".into(),
                max_steps: 4,
                tools,
                approval_timeout: None,
                dynamic: Vec::new(),
                message_mode: Default::default(),
                schedules: Default::default(),
                callbacks: Default::default(),
                delegation: Default::default(),
                context: Default::default(),
            },
        };
        s.commit(vec![SessionEvent::SessionCreated {
            agent: "ops".into(),
            principal: None,
            parent: None,
        }]);
        s
    }

    fn commit(&mut self, events: Vec<SessionEvent>) {
        for event in events {
            let seq = self.state.last_seq + 1;
            self.state.apply(seq, &event);
            self.journal.push(event);
        }
    }

    /// Decides, commits the events, returns the actions.
    fn send(&mut self, input: Input) -> Result<Vec<Action>, Refusal> {
        let decision = decide(&self.state, "s1", input, &self.agent)?;
        self.commit(decision.events);
        Ok(decision.actions)
    }

    fn kinds_since(&self, from: usize) -> Vec<String> {
        self.journal[from..]
            .iter()
            .map(|e| e.to_parts().0)
            .collect()
    }

    /// Replays the whole journal into a fresh state (what activation does).
    fn replayed(&self) -> SessionState {
        let mut state = SessionState::default();
        for (i, event) in self.journal.iter().enumerate() {
            state.apply(i as i64 + 1, event);
        }
        state
    }
}

/// Ada's decision on a call, not bound to an argument hash.
fn decision(call_id: &str, approved: bool, scope: ApprovalScope) -> Input {
    Input::Decision {
        call_id: call_id.into(),
        approved,
        reason: None,
        decided_by: "ada".into(),
        scope,
        args_hash: None,
        overspend_usd: None,
        may_spend: true,
    }
}

fn user(text: &str) -> Input {
    Input::UserMessage {
        text: text.into(),
        client_id: None,
        mode: None,
        attachments: Vec::new(),
    }
}

fn answer(call_id: &str, text: &str, calls: Vec<(&str, Value)>) -> Input {
    Input::ModelFinished {
        call_id: call_id.into(),
        output: ModelOutput {
            text: text.into(),
            tool_calls: calls.into_iter().map(|(t, a)| (t.to_string(), a)).collect(),
            usage: stead_actors::Usage {
                prompt_tokens: 10,
                completion_tokens: 5,
            },
            provider: "double".into(),
            model: "scripted".into(),
            latency_ms: 1.0,
            ttft_ms: 0.5,
            cost: 0.0,
            guardrails: Vec::new(),
        },
    }
}

//! The tools of an evaluation's session. In `replay` mode a call whose tool and arguments
//! match a call of the recording gets the recorded result — no side effect, exact and free;
//! an unmatched call of an idempotent tool runs for real only when the run allows it
//! (`live_idempotent`); any other gets a clear "not available in evaluation" error, and is
//! marked in the case's report. In `live` mode tools run for real, non-idempotent ones only
//! with `side_effects`. Built-in tools (memory block, schedules, sub-agents) run inside the
//! session's decisions as always.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stead_actors::session::Agent;
use stead_actors::tools::{DynamicTools, Tool, ToolContext, ToolError};
use stead_actors::{ApprovalPolicy, SeenTool};

use crate::outcome::CallOutcome;

/// How a run's tools behave.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    #[default]
    Replay,
    Live,
}

/// What became of one tool call of an evaluation's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Served {
    /// The recorded result.
    Replayed,
    /// Run for real.
    Live,
    /// Neither: the call got "not available in evaluation".
    Unavailable,
}

/// The tool calls of one session, as they were served (tool, arguments, how).
#[derive(Debug, Default)]
pub struct Ledger(Mutex<Vec<(String, Value, Served)>>);

impl Ledger {
    pub fn take(&self) -> Vec<(String, Value, Served)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn note(&self, tool: &str, arguments: &Value, served: Served) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push((
            tool.to_string(),
            arguments.clone(),
            served,
        ));
    }
}

/// The rules one session's tools follow.
#[derive(Debug, Clone)]
pub struct Serving {
    pub mode: ToolMode,
    pub live_idempotent: bool,
    pub side_effects: bool,
    /// The recording's calls that finished or failed, in order.
    pub recorded: Vec<CallOutcome>,
}

/// `agent` with every tool served by `serving`, noting each call in `ledger`.
pub fn evaluation_agent(agent: &Agent, serving: Arc<Serving>, ledger: Arc<Ledger>) -> Agent {
    let wrap = |inner: Arc<dyn Tool>| -> Arc<dyn Tool> {
        Arc::new(EvalTool {
            inner,
            serving: serving.clone(),
            ledger: ledger.clone(),
        })
    };
    Agent {
        name: agent.name.clone(),
        system_prompt: agent.system_prompt.clone(),
        rules: agent.rules.clone(),
        tools: agent
            .tools
            .iter()
            .map(|(name, tool)| (name.clone(), wrap(tool.clone())))
            .collect(),
        dynamic: agent.dynamic.clone().map(|inner| {
            Arc::new(EvalDynamic {
                inner,
                serving: serving.clone(),
                ledger: ledger.clone(),
            }) as Arc<dyn DynamicTools>
        }),
        guardrails: agent.guardrails.clone(),
    }
}

struct EvalTool {
    inner: Arc<dyn Tool>,
    serving: Arc<Serving>,
    ledger: Arc<Ledger>,
}

#[async_trait]
impl Tool for EvalTool {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn parameters(&self) -> Value {
        self.inner.parameters()
    }
    fn approval(&self) -> &ApprovalPolicy {
        self.inner.approval()
    }
    fn idempotent(&self) -> bool {
        self.inner.idempotent()
    }
    fn builtin(&self) -> Option<stead_actors::schedule_tool::Builtin> {
        self.inner.builtin()
    }

    async fn execute(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let name = self.inner.name();
        let serving = &self.serving;
        if serving.mode == ToolMode::Replay {
            let recorded = serving
                .recorded
                .iter()
                .find(|c| c.tool == name && c.arguments == arguments);
            if let Some(call) = recorded {
                self.ledger.note(name, &arguments, Served::Replayed);
                return match (&call.result, &call.error) {
                    (Some(result), _) => Ok(result.clone()),
                    (None, Some(error)) => Err(ToolError(error.clone())),
                    (None, None) => Err(ToolError(
                        "the recording has no result for this call".into(),
                    )),
                };
            }
        }
        let live = match serving.mode {
            ToolMode::Replay => serving.live_idempotent && self.inner.idempotent(),
            ToolMode::Live => serving.side_effects || self.inner.idempotent(),
        };
        if !live {
            self.ledger.note(name, &arguments, Served::Unavailable);
            return Err(ToolError(format!(
                "`{name}` is not available in evaluation: no recorded call of it with these \
                 arguments, and the run does not let it run"
            )));
        }
        self.ledger.note(name, &arguments, Served::Live);
        self.inner.execute(arguments, context).await
    }
}

struct EvalDynamic {
    inner: Arc<dyn DynamicTools>,
    serving: Arc<Serving>,
    ledger: Arc<Ledger>,
}

impl DynamicTools for EvalDynamic {
    fn seen(&self) -> (String, Vec<SeenTool>) {
        self.inner.seen()
    }

    fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        let inner = self.inner.tool(name)?;
        Some(Arc::new(EvalTool {
            inner,
            serving: self.serving.clone(),
            ledger: self.ledger.clone(),
        }))
    }

    fn sources(&self) -> Vec<String> {
        self.inner.sources()
    }
}

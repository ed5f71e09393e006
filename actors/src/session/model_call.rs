//! The live actor's model call: the request built from the folded state, and the task that
//! fits the prompt to the agent's budget, charges the delegation budget, streams the answer
//! back as deltas and reports the outcome as an input.

use std::sync::{Arc, Mutex};

use ractor::ActorRef;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::children::DelegationSteps;
use super::compaction::{self, Fit, PromptParts};
use super::live::{output_holds_nul, panic_message, without_nul};
use super::{
    Calibration, Live, ModelClient, ModelError, ModelRequest, SessionMsg, StreamingCall, ToolSpec,
};
use crate::context::ContextRules;
use crate::decide::Input;
use stead_model::CallId;

impl Live {
    /// Starts the model call `call_id` of the running turn.
    pub(super) fn call_model(&mut self, myself: &ActorRef<SessionMsg>, call_id: CallId) {
        let cancel = CancellationToken::new();
        self.streaming = Some(StreamingCall {
            call_id: call_id.clone(),
            cancel: cancel.clone(),
            text: String::new(),
        });
        let agent = &self.deps.agent;
        let task = ModelCallTask {
            request: self.model_request(),
            base_prompt: self
                .state
                .overrides
                .system_prompt
                .clone()
                .unwrap_or_else(|| agent.system_prompt.clone()),
            summary: self.state.summary.clone(),
            memory: self.state.memory.clone(),
            context_rules: agent.rules.context.clone(),
            model: self.deps.model.clone(),
            me: myself.clone(),
            turn: self.turn_span.clone().unwrap_or_else(tracing::Span::none),
            steps: self.delegation_steps(),
            calibration: self.calibration.clone(),
            call_id,
            cancel,
        };
        tokio::spawn(task.run());
    }

    /// What the model is asked: the system prompt with the summary and the memory block, the
    /// transcript as shown (long tool results cut), the agent's tools and the dynamic ones.
    fn model_request(&self) -> ModelRequest {
        let agent = &self.deps.agent;
        let base_prompt = self
            .state
            .overrides
            .system_prompt
            .as_deref()
            .unwrap_or(&agent.system_prompt);
        ModelRequest {
            session_id: self.deps.session_id,
            route: self.state.route(&agent.rules.route).to_string(),
            system_prompt: crate::context::system_prompt_with(
                base_prompt,
                self.state.summary.as_deref(),
                &self.state.memory,
            ),
            transcript: crate::context::shown_shared(
                &self.state.transcript,
                agent.rules.context.max_tool_result_tokens,
            ),
            principal: self.state.principal().to_string(),
            metadata: self.metadata.clone(),
            repair: self
                .state
                .turn
                .as_ref()
                .is_some_and(|t| t.rejected_replies > 0),
            budget_grant_usd: self.state.turn.as_ref().and_then(|t| t.budget_grant),
            tools: agent
                .tools
                .values()
                .map(|t| ToolSpec {
                    name: t.name().to_string(),
                    description: t.description().to_string(),
                    parameters: t.parameters(),
                })
                .chain(self.state.seen_tools.iter().map(|t| ToolSpec {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    parameters: t.parameters.clone(),
                }))
                .collect(),
        }
    }
}

/// One model call's task, with everything it needs from the actor.
struct ModelCallTask {
    request: ModelRequest,
    base_prompt: String,
    summary: Option<String>,
    memory: String,
    context_rules: ContextRules,
    model: Arc<dyn ModelClient>,
    me: ActorRef<SessionMsg>,
    turn: tracing::Span,
    steps: DelegationSteps,
    calibration: Arc<Mutex<Option<Calibration>>>,
    call_id: CallId,
    cancel: CancellationToken,
}

impl ModelCallTask {
    async fn run(self) {
        let ModelCallTask {
            request,
            base_prompt,
            summary,
            memory,
            context_rules,
            model,
            me,
            turn,
            steps,
            calibration,
            call_id,
            cancel,
        } = self;
        let report = |input: Input| {
            let _ = me.cast(SessionMsg::Input(input, None));
        };
        let last = calibration.lock().ok().and_then(|l| l.clone());
        // The prompt must fit the agent's budget before anything is charged or sent.
        let parts = PromptParts {
            base: &base_prompt,
            summary: summary.as_deref(),
            memory: &memory,
        };
        let chars = match compaction::fit(
            model.as_ref(),
            &request,
            &context_rules,
            &parts,
            last.as_ref(),
            &call_id,
            cancel.clone(),
        )
        .await
        {
            Fit::Send { chars } => chars,
            Fit::Compact(input) => return report(input),
            Fit::Overflow(error) => return report(Input::ModelFailed { call_id, error }),
        };
        if let Some(error) = steps.charge().await {
            return report(Input::ModelFailed { call_id, error });
        }
        let (deltas, mut stream) = tokio::sync::mpsc::unbounded_channel();
        let forward = {
            let me = me.clone();
            let call_id = call_id.clone();
            tokio::spawn(async move {
                while let Some(text) = stream.recv().await {
                    let _ = me.cast(SessionMsg::Delta {
                        call_id: call_id.clone(),
                        text,
                    });
                }
            })
        };
        let counted = Calibration {
            route: request.route.clone(),
            reported: 0,
            chars,
        };
        let call = tokio::spawn(
            async move { model.complete(request, deltas, cancel).await }.instrument(turn),
        );
        let result = match call.await {
            Ok(result) => result,
            Err(join) => Err(ModelError::Crashed(panic_message(join))),
        };
        let _ = forward.await;
        if let Ok(output) = &result {
            if let Ok(mut last) = calibration.lock() {
                *last = Some(Calibration {
                    reported: output.usage.prompt_tokens,
                    ..counted
                });
            }
        }
        report(match result {
            Ok(output) if output_holds_nul(&output) => Input::ModelFailed {
                call_id,
                error: "the model's answer contains a NUL character (\\u0000), which the \
                        journal cannot store"
                    .into(),
            },
            Ok(output) => Input::ModelFinished { call_id, output },
            Err(ModelError::Budget(refusal)) => Input::ModelBudgetExceeded { call_id, refusal },
            Err(error) => Input::ModelFailed {
                call_id,
                error: without_nul(error.to_string()),
            },
        });
    }
}

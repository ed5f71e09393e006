//! The live actor's tool calls: a built-in runs inside a decision, an `agent` call starts a
//! child session, any other tool runs as a task of its own (contained, cancellable, traced)
//! that reports its outcome as an input.

use std::sync::Arc;

use ractor::ActorRef;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::live::{panic_message, without_nul};
use super::{Live, SessionMsg};
use crate::decide::Input;
use crate::tools::{ProgressSink, Tool, ToolContext};
use stead_model::CallId;

/// How long a cancelled tool gets to stop by itself before its task is aborted.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

impl Live {
    /// Starts the started call `call_id` of `tool`.
    pub(super) fn run_tool(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        call_id: CallId,
        tool: String,
        arguments: Value,
        idempotency_key: String,
    ) {
        let Some(tool) = self.deps.agent.tool(&tool) else {
            let input = Input::ToolFailed {
                call_id,
                error: format!("unknown tool `{tool}` (its source no longer offers it)"),
            };
            let _ = myself.cast(SessionMsg::Input(input, None));
            return;
        };
        if let Some(crate::schedule_tool::Builtin::Agent { agent }) = tool.builtin() {
            self.start_child(myself, call_id, agent, arguments);
            return;
        }
        if tool.builtin().is_some() {
            // Run inside a decision: its effects and result are journaled together.
            // Milliseconds, as REST creates schedules: the due index keeps microseconds.
            let now = chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 3);
            let _ = myself.cast(SessionMsg::Input(Input::RunBuiltin { call_id, now }, None));
            return;
        }
        let cancel = CancellationToken::new();
        self.running_tools.insert(call_id.clone(), cancel.clone());
        let progress = {
            let me = myself.clone();
            let call_id = call_id.clone();
            ProgressSink::new(move |progress| {
                let _ = me.cast(SessionMsg::Progress {
                    call_id: call_id.clone(),
                    progress,
                });
            })
        };
        let context = ToolContext {
            session_id: self.deps.session_id,
            project: self.deps.project,
            call_id: call_id.clone(),
            idempotency_key,
            cancel: cancel.clone(),
            progress,
            principal: self.state.principal().to_string(),
        };
        let span = tracing::info_span!(
            parent: self.turn_span.as_ref().and_then(|s| s.id()),
            "execute_tool",
            "otel.name" = format!("execute_tool {}", tool.name()),
            "otel.kind" = "internal",
            "gen_ai.operation.name" = "execute_tool",
            "gen_ai.tool.name" = %tool.name(),
            "gen_ai.tool.call.id" = %call_id,
            "gen_ai.conversation.id" = %self.deps.session_id,
            // Set by tools with a server behind them (MCP).
            "stead.tool.server" = tracing::field::Empty,
        );
        let me = myself.clone();
        let guard = self.deps.agent.guardrails.clone();
        let placeholders = self.placeholders.clone();
        let principal = context.principal.clone();
        tokio::spawn(async move {
            let input = match (
                run_contained(tool, arguments, context, cancel, span).await,
                guard,
            ) {
                (
                    Input::ToolFinished {
                        call_id,
                        mut result,
                    },
                    Some(guard),
                ) => {
                    let checks = stead_guardrails::results::check_value(
                        &guard.guardrails,
                        &mut result,
                        &placeholders,
                        guard.judge.as_deref(),
                        &principal,
                    )
                    .await;
                    Input::ToolChecked {
                        call_id,
                        result,
                        checks,
                    }
                }
                (input, _) => input,
            };
            let _ = me.cast(SessionMsg::Input(input, None));
        });
    }
}

/// Runs the tool in a task of its own: a panic in it is contained there and becomes the call's
/// error; the session and its actor carry on. A cancelled call gets a grace to stop by itself;
/// then its task is aborted. Either way exactly one outcome comes back (the journal already
/// holds the cancel, so the actor drops it as stale).
async fn run_contained(
    tool: Arc<dyn Tool>,
    arguments: Value,
    context: ToolContext,
    cancel: CancellationToken,
    span: tracing::Span,
) -> Input {
    let call_id = context.call_id.clone();
    let mut run =
        tokio::spawn(async move { tool.execute(arguments, &context).await }.instrument(span));
    let outcome = tokio::select! {
        outcome = &mut run => outcome,
        () = async {
            cancel.cancelled().await;
            tokio::time::sleep(CANCEL_GRACE).await;
        } => {
            run.abort();
            run.await
        }
    };
    match outcome {
        Ok(Ok(result)) if stead_persistence::contains_nul(&result) => Input::ToolFailed {
            call_id,
            error: "the tool's result contains a NUL character (\\u0000), which the journal \
                    cannot store"
                .into(),
        },
        Ok(Ok(result)) => Input::ToolFinished { call_id, result },
        Ok(Err(error)) => Input::ToolFailed {
            call_id,
            error: without_nul(error.0),
        },
        Err(join) => Input::ToolFailed {
            call_id,
            error: format!("the tool crashed: {}", panic_message(join)),
        },
    }
}

//! How sessions reach models: the tool list the model sees, one model call's request, and the
//! `ModelClient` trait the local engine and the model router implement.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

use crate::decide::ModelOutput;
use crate::state::TranscriptEntry;

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// One model call of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The session whose actor calls.
    pub session_id: Uuid,
    pub route: String,
    pub system_prompt: String,
    pub transcript: Vec<TranscriptEntry>,
    pub tools: Vec<ToolSpec>,
    /// Who the call is charged to: the API key (fingerprint) that created or forked the
    /// session, or `local` (the router's per-key limits and budgets apply to it).
    pub principal: String,
    /// The session's metadata (its row's), kept with the call's request-log row.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// A repair call (the turn's last reply was rejected, docs/sessions.md "Replies"): the
    /// model is offered no tools, and the transcript is followed by
    /// [`crate::reply::REPAIR_INSTRUCTION`] as a system message.
    pub repair: bool,
}

/// Why a model call gave no answer. Its text is what `model_call_failed` journals.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The turn was cancelled while the call ran.
    #[error("cancelled")]
    Cancelled,
    /// The model client could not answer (for the router: every target failed, a limit or
    /// budget refused the call, no such route); the message says why.
    #[error("{0}")]
    Failed(String),
    /// The model client panicked.
    #[error("the model client crashed: {0}")]
    Crashed(String),
}

/// How large a model call's prompt is, as its route would send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptSize {
    pub tokens: u64,
    /// The route's context window, when known (local models).
    pub window: Option<u64>,
    /// Counted by the model's tokenizer (else estimated, see [`estimate`]).
    pub exact: bool,
}

/// The estimate for a route whose tokens cannot be counted here (remote APIs): the request's
/// characters — system prompt, transcript, tool definitions — over
/// [`crate::context::CHARS_PER_TOKEN`].
pub fn estimate(request: &ModelRequest) -> PromptSize {
    let chars = request.system_prompt.len()
        + request
            .transcript
            .iter()
            .map(crate::context::entry_chars)
            .sum::<usize>()
        + request
            .tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
            .sum::<usize>();
    PromptSize {
        tokens: crate::context::estimate(chars),
        window: None,
        exact: false,
    }
}

/// How sessions reach models: in `stead serve`, the model router (`src/model_router.rs`).
#[async_trait]
pub trait ModelClient: Send + Sync + 'static {
    /// The size of `request`'s prompt on its route (the actor keeps it inside the agent's
    /// budget before calling). By default an estimate from its characters.
    async fn measure(&self, request: &ModelRequest) -> PromptSize {
        estimate(request)
    }

    /// Streams text deltas into `deltas` and returns the whole answer. Stops early (with an
    /// error) once `cancel` is set.
    async fn complete(
        &self,
        request: ModelRequest,
        deltas: UnboundedSender<String>,
        cancel: Arc<AtomicBool>,
    ) -> Result<ModelOutput, ModelError>;
}

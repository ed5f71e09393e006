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

/// How sessions reach models: in `stead serve`, the model router (`src/model_router.rs`).
#[async_trait]
pub trait ModelClient: Send + Sync + 'static {
    /// Streams text deltas into `deltas` and returns the whole answer. Stops early (with an
    /// error) once `cancel` is set.
    async fn complete(
        &self,
        request: ModelRequest,
        deltas: UnboundedSender<String>,
        cancel: Arc<AtomicBool>,
    ) -> Result<ModelOutput, ModelError>;
}

//! How sessions reach models: the tool list the model sees, one model call's request, and the
//! `ModelClient` trait the local engine and the model router implement.

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::decide::ModelOutput;
use crate::state::Transcript;

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
    /// The transcript as shown ([`crate::context::shown_shared`]: it shares the state's).
    pub transcript: Transcript,
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
    /// The overspend a person approved for this call (USD), past the budgets that refused it.
    pub budget_grant_usd: Option<f64>,
}

/// Why a model call gave no answer. Its text is what `model_call_failed` journals.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// The turn was cancelled while the call ran.
    #[error("cancelled")]
    Cancelled,
    /// The model client could not answer (for the router: every target failed, a limit or
    /// budget refused the call, no such route); the message says why.
    #[error("{0}")]
    Failed(String),
    /// A key's or a project's budget refused the call: the session parks on a budget
    /// approval instead of failing.
    #[error("{}", .0.message)]
    Budget(crate::inputs::BudgetRefusal),
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

/// The characters of `request`'s prompt: system prompt, transcript and tool definitions.
pub fn prompt_chars(request: &ModelRequest) -> usize {
    request.system_prompt.len()
        + request
            .transcript
            .leaves()
            .flatten()
            .map(crate::context::entry_chars)
            .sum::<usize>()
        + request
            .tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
            .sum::<usize>()
}

/// The estimate for a route whose tokens cannot be counted here (remote APIs): the request's
/// characters — system prompt, transcript, tool definitions — over
/// [`crate::context::CHARS_PER_TOKEN`].
pub fn estimate(request: &ModelRequest) -> PromptSize {
    PromptSize {
        tokens: crate::context::estimate(prompt_chars(request)),
        window: None,
        exact: false,
    }
}

/// A session's last answered model call as its provider counted it: the route, the
/// `prompt_tokens` it reported and the prompt's characters ([`prompt_chars`]). The session
/// actor keeps it in memory (not journaled: it only sharpens an estimate; after a restart the
/// next call starts from the plain estimate again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calibration {
    pub route: String,
    pub reported: u64,
    pub chars: usize,
}

impl PromptSize {
    /// An estimated size corrected by the last call the provider counted on the same route
    /// (docs/sessions.md, "Token counting"): its reported `prompt_tokens` plus the estimate of
    /// the characters added since, or — when the prompt shrank (a compaction) — the reported
    /// count scaled by the characters kept. An exact size, a call on another route, or a
    /// report under a third of that call's own estimate (no tokenizer gives fewer than one
    /// token per 12 bytes: such a count is not the whole prompt's) leaves the size as it is.
    /// `chars` are the request's ([`prompt_chars`]), `route` its route.
    pub fn calibrated(self, route: &str, chars: usize, last: Option<&Calibration>) -> PromptSize {
        let Some(last) = last.filter(|l| {
            !self.exact
                && l.route == route
                && l.chars > 0
                && l.reported.saturating_mul(3) >= crate::context::estimate(l.chars)
        }) else {
            return self;
        };
        let tokens = if chars >= last.chars {
            last.reported + crate::context::estimate(chars - last.chars)
        } else {
            (last.reported as u128 * chars as u128).div_ceil(last.chars as u128) as u64
        };
        PromptSize { tokens, ..self }
    }
}

/// How sessions reach models: in `stead serve`, the model router (`agents/src/models.rs`).
#[async_trait]
pub trait ModelClient: Send + Sync + 'static {
    /// The size of `request`'s prompt on its route (the actor keeps it inside the agent's
    /// budget before calling). By default an estimate from its characters.
    async fn measure(&self, request: &ModelRequest) -> PromptSize {
        estimate(request)
    }

    /// Streams text deltas into `deltas` and returns the whole answer. Stops early (with an
    /// error) once `cancel` is cancelled — as a tool's call stops on its token.
    async fn complete(
        &self,
        request: ModelRequest,
        deltas: UnboundedSender<String>,
        cancel: CancellationToken,
    ) -> Result<ModelOutput, ModelError>;
}

//! What the model router asks of a provider: one chat completion for one model, streamed or
//! not, and (where it makes them) embeddings of some texts.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::chat::{ChatMessage, FinishReason, ToolCall, ToolChoice, ToolSpec, Usage};

/// Sampling parameters as the caller gave them (unset: the provider's default).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Params {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// One chat completion asked of a route.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RouterRequest {
    /// The route's name (what an OpenAI client sends as `model`).
    pub route: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub params: Params,
    /// Other OpenAI request fields (`response_format`, `logit_bias`, …), passed to
    /// OpenAI-compatible providers as given; the local engine ignores them.
    pub extra: Map<String, Value>,
}

/// What a streaming provider reports as it goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Chunk {
    /// Answer text.
    Text(String),
    /// Part of a tool call arrived (it counts as the first token, but is not text).
    ToolCallFragment,
}

/// One attempt at one target.
pub struct ProviderCall<'a> {
    pub model: &'a str,
    pub request: &'a RouterRequest,
    /// `max_tokens` to send: the caller's, else the target's default.
    pub max_tokens: Option<u32>,
    /// Text of the answer that earlier targets already streamed (mid-stream failover): the
    /// provider asks its model to continue it. Empty on a first attempt.
    pub continue_from: &'a str,
    /// `Some` for a streamed call: every text fragment, as it arrives.
    pub chunks: Option<UnboundedSender<Chunk>>,
}

/// A provider's finished answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderReply {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: FinishReason,
    pub usage: Usage,
    /// The model that answered, as the provider names it.
    pub model: String,
}

/// A provider's embeddings.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedReply {
    /// One vector per input, in order.
    pub vectors: Vec<Vec<f32>>,
    pub prompt_tokens: usize,
    /// The model that answered, as the provider names it.
    pub model: String,
}

/// Audio to transcribe (`POST /v1/audio/transcriptions` through a route).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AudioInput {
    pub bytes: Vec<u8>,
    /// The file's name as the client sent it (providers read the container from it).
    pub file_name: String,
    pub content_type: Option<String>,
    /// ISO 639-1 code the client says the speech is in.
    pub language: Option<String>,
}

/// A provider's transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscribeReply {
    pub text: String,
    /// As the provider names it (`english`), when it says.
    pub language: Option<String>,
    /// Seconds of audio, when the provider says.
    pub duration: Option<f64>,
}

/// How an attempt failed, in the terms that retry rules use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The provider answered with an HTTP error status.
    Status,
    /// No connection could be made.
    Connect,
    /// The attempt ran past its deadline.
    Timeout,
    /// The first token did not arrive in time.
    TtftTimeout,
    /// The stream broke or could not be read.
    Stream,
    /// The request itself is wrong for this provider (bad parameters, unknown model); retrying
    /// the same target does not help.
    Invalid,
    /// The provider is not available (e.g. an unprepared local model).
    Unavailable,
}

impl FailureKind {
    /// The name used in `retry.on_errors` and in the request log.
    pub fn as_str(&self) -> &'static str {
        match self {
            FailureKind::Status => "status",
            FailureKind::Connect => "connect",
            FailureKind::Timeout => "timeout",
            FailureKind::TtftTimeout => "ttft_timeout",
            FailureKind::Stream => "stream",
            FailureKind::Invalid => "invalid",
            FailureKind::Unavailable => "unavailable",
        }
    }
}

/// A failed attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderError {
    pub kind: FailureKind,
    /// The HTTP status, for [`FailureKind::Status`].
    pub status: Option<u16>,
    /// The provider's `Retry-After`, when it sent one.
    pub retry_after: Option<Duration>,
    pub message: String,
    /// Whether `message` quotes the provider's own words (an error answer's text, an error
    /// event in a stream): they stay in the request log and with the router's direct callers,
    /// never in a session's journal (a hosted API's text can name keys or accounts).
    pub quoted: bool,
}

impl ProviderError {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        ProviderError {
            kind,
            status: None,
            retry_after: None,
            message: message.into(),
            quoted: false,
        }
    }

    /// The same error, marked as quoting the provider's own words.
    pub fn quoting(mut self) -> Self {
        self.quoted = true;
        self
    }

    pub fn status(status: u16, retry_after: Option<Duration>, message: impl Into<String>) -> Self {
        ProviderError {
            kind: FailureKind::Status,
            status: Some(status),
            retry_after,
            message: message.into(),
            quoted: false,
        }
    }
}

impl ProviderError {
    /// Whether the failure says the target is unhealthy (server errors, throttling, timeouts,
    /// broken connections), rather than that this request was wrong for it.
    pub fn counts_against_target(&self) -> bool {
        match self.kind {
            FailureKind::Status => matches!(self.status, Some(408 | 429 | 500..=599)),
            FailureKind::Invalid => false,
            _ => true,
        }
    }
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A source of chat completions: the local engine pool, or an OpenAI-compatible API.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The configured name (`[[providers]] name`).
    fn name(&self) -> &str;
    /// The OpenTelemetry `gen_ai.provider.name` of this kind of provider.
    fn system(&self) -> &str;
    /// Runs one attempt. Dropping the future abandons it (the provider stops its work).
    async fn chat(&self, call: ProviderCall<'_>) -> Result<ProviderReply, ProviderError>;
    /// Embeds `inputs` with `model`, one vector per input in order. A provider that makes no
    /// embeddings refuses the request as invalid (the route moves on to its next target).
    async fn embed(&self, model: &str, inputs: &[String]) -> Result<EmbedReply, ProviderError> {
        let _ = (model, inputs);
        Err(ProviderError::new(
            FailureKind::Invalid,
            format!("provider `{}` does not make embeddings", self.name()),
        ))
    }
    /// Transcribes `audio` with `model`. A provider without speech to text refuses the request
    /// as invalid (the route moves on to its next target).
    async fn transcribe(
        &self,
        model: &str,
        audio: &AudioInput,
    ) -> Result<TranscribeReply, ProviderError> {
        let _ = (model, audio);
        Err(ProviderError::new(
            FailureKind::Invalid,
            format!("provider `{}` does not transcribe audio", self.name()),
        ))
    }
    /// The prompt tokens `request` would take on `model`, and the model's context window —
    /// exact, from the provider's own tokenizer (the local engine) — or `None` when the
    /// provider cannot tell without calling (remote APIs, the default).
    fn measure(&self, model: &str, request: &RouterRequest) -> Option<(u64, u64)> {
        let _ = (model, request);
        None
    }
    /// Whether `model` sees images in messages (`ChatMessage::images`). Remote APIs: yes, by
    /// default (a route says otherwise with `images = false`); the local engine's text models
    /// answer no.
    fn sees_images(&self, model: &str) -> bool {
        let _ = model;
        true
    }
    /// Figures of the provider's own for `/metrics` (the local engine's prefix cache); none
    /// by default.
    fn metrics(&self) -> Vec<ProviderMetric> {
        Vec::new()
    }
}

/// One figure a provider reports: the router writes each family's `HELP` and `TYPE` once and
/// labels every series with the provider's name and `model`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderMetric {
    pub name: &'static str,
    pub help: &'static str,
    /// A counter (else a gauge).
    pub counter: bool,
    pub model: String,
    pub value: f64,
}

use serde::{Deserialize, Serialize};

pub use stead_model::chat::{
    ChatMessage, FinishReason, Role, ToolCall, ToolChoice, ToolSpec, Usage,
};

/// How to pick tokens and when to stop.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 = off.
    pub top_p: f32,
    /// 0 = off.
    pub top_k: usize,
    /// Fixed seed for reproducible sampling; `None` draws one.
    pub seed: Option<u64>,
    pub max_tokens: usize,
    /// Text that ends the answer (not included in it).
    pub stop: Vec<String>,
    /// Never end at the end-of-turn token: generate exactly `max_tokens` (benchmarks).
    pub ignore_eos: bool,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: None,
            max_tokens: 256,
            stop: Vec::new(),
            ignore_eos: false,
        }
    }
}

/// One chat completion request to a local model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub sampling: SamplingParams,
    /// Text the answer starts with, already written (the model continues it; it is not part of
    /// the returned text). Used when a stream that broke elsewhere continues here.
    pub assistant_prefix: String,
}

/// Timings of one generation, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Timings {
    /// From submission to the first generated token (queueing and prefill included).
    pub ttft_ms: f64,
    /// Mean time between generated tokens after the first.
    pub inter_token_ms: f64,
    /// From submission to the end.
    pub total_ms: f64,
}

/// The finished result of a generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub model: String,
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: FinishReason,
    pub usage: Usage,
    /// Prompt tokens whose KV came from the prefix cache (not prefilled).
    #[serde(default)]
    pub cached_prompt_tokens: usize,
    pub timings: Timings,
}

/// What a streaming caller receives, in order: deltas, then exactly one `Done` or `Failed`.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Newly decoded answer text (never a partial UTF-8 character or a partial stop sequence).
    Delta(String),
    Done(Completion),
    Failed(crate::Error),
}

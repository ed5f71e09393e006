use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One chat message, OpenAI-shaped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    /// Calls an assistant message made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `role = tool`: the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }
}

/// A function the model may call: name, description and JSON-schema parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
}

fn empty_object_schema() -> Value {
    serde_json::json!({ "type": "object", "properties": {} })
}

/// OpenAI's `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides; a call it opens is constrained to the schemas.
    #[default]
    Auto,
    /// No tool calls.
    None,
    /// Exactly one call to some tool.
    Required,
    /// Exactly one call to this tool.
    Function(String),
}

/// A call the model made. `arguments` is JSON text, as in OpenAI's API, and always parses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

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

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End of turn or a stop sequence.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The answer is a tool call.
    ToolCalls,
    /// The caller cancelled or went away.
    Cancelled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
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

//! OpenAI's chat completions format as the router writes it, as typed serde structs: the
//! request body sent to a provider, and the `chat.completion` object and
//! `chat.completion.chunk`s answered to callers. (What providers send back is read leniently
//! from JSON values in `assemble.rs`: real servers deviate from the schema — arguments as objects,
//! no `index`, no `content` — and a strict deserializer would refuse answers the router can use.)

use serde::Serialize;
use serde_json::{Map, Value};

use crate::chat::{ChatMessage, FinishReason, Role, ToolCall, ToolChoice, ToolSpec, Usage};
use crate::provider::Params;

/// One message: `content` is null when an assistant only called tools, and an array of
/// `text` and `image_url` parts when the message carries images.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireMessage {
    pub role: Role,
    pub content: Option<WireContent>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<WireToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A message's content: its text, or its parts when it shows images.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum WireContent {
    Text(String),
    Parts(Vec<WirePart>),
}

/// One content part.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WirePart {
    Text { text: String },
    ImageUrl { image_url: WireImageUrl },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireImageUrl {
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl From<&ChatMessage> for WireMessage {
    fn from(message: &ChatMessage) -> Self {
        let content = if !message.images.is_empty() {
            let text = (!message.content.is_empty()).then(|| WirePart::Text {
                text: message.content.clone(),
            });
            let images = message.images.iter().map(|image| WirePart::ImageUrl {
                image_url: WireImageUrl {
                    url: image.url.clone(),
                    detail: image.detail.clone(),
                },
            });
            Some(WireContent::Parts(text.into_iter().chain(images).collect()))
        } else if message.tool_calls.is_empty() || !message.content.is_empty() {
            Some(WireContent::Text(message.content.clone()))
        } else {
            None
        };
        WireMessage {
            role: message.role,
            content,
            tool_calls: message.tool_calls.iter().map(WireToolCall::from).collect(),
            tool_call_id: message.tool_call_id.clone(),
        }
    }
}

/// A tool call; `index` only inside a stream delta.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireToolCall {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: WireFunctionCall,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireFunctionCall {
    pub name: String,
    /// JSON text.
    pub arguments: String,
}

impl From<&ToolCall> for WireToolCall {
    fn from(call: &ToolCall) -> Self {
        WireToolCall {
            index: None,
            id: call.id.clone(),
            kind: "function",
            function: WireFunctionCall {
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            },
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireTool {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: WireFunction,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireFunction {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

impl From<&ToolSpec> for WireTool {
    fn from(tool: &ToolSpec) -> Self {
        WireTool {
            kind: "function",
            function: WireFunction {
                name: tool.name.clone(),
                description: tool.description.clone(),
                parameters: tool.parameters.clone(),
            },
        }
    }
}

/// `tool_choice`: a mode, or one function.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum WireToolChoice {
    Mode(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        function: WireFunctionName,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireFunctionName {
    pub name: String,
}

impl From<&ToolChoice> for WireToolChoice {
    fn from(choice: &ToolChoice) -> Self {
        match choice {
            ToolChoice::Auto => WireToolChoice::Mode("auto"),
            ToolChoice::None => WireToolChoice::Mode("none"),
            ToolChoice::Required => WireToolChoice::Mode("required"),
            ToolChoice::Function(name) => WireToolChoice::Function {
                kind: "function",
                function: WireFunctionName { name: name.clone() },
            },
        }
    }
}

/// The body of a request to an OpenAI-compatible provider. Fields the caller sent that the
/// router does not read (`extra`) pass through; the router's own fields win over them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderRequest {
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    pub model: String,
    pub messages: Vec<WireMessage>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<WireTool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<WireToolChoice>,
    /// Sampling parameters; `max_tokens` is the target's when it sets one.
    #[serde(flatten)]
    pub params: Params,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamOptions {
    pub include_usage: bool,
}

/// Token counts, with their total.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WireUsage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

impl From<&Usage> for WireUsage {
    fn from(usage: &Usage) -> Self {
        WireUsage {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.prompt_tokens + usage.completion_tokens,
        }
    }
}

/// `finish_reason` as OpenAI spells it (a cancelled answer stopped).
pub fn finish_reason_str(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::Cancelled => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
    }
}

/// A whole answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: i64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    pub usage: WireUsage,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompletionChoice {
    pub index: u32,
    pub message: WireMessage,
    pub finish_reason: &'static str,
    /// Always null: the router does not return log probabilities.
    pub logprobs: Option<Value>,
}

/// One piece of a streamed answer; the closing usage chunk has no choices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: &'static str,
    pub created: i64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<WireUsage>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<&'static str>,
    pub logprobs: Option<Value>,
}

/// What a chunk adds to the answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<WireToolCall>,
}

impl Delta {
    /// The first chunk's delta: the assistant's role, no text yet.
    pub fn opening() -> Self {
        Delta {
            role: Some(Role::Assistant),
            content: Some(String::new()),
            tool_calls: Vec::new(),
        }
    }

    pub fn text(text: impl Into<String>) -> Self {
        Delta {
            content: Some(text.into()),
            ..Delta::default()
        }
    }

    /// A finished answer's tool calls as one delta (index, id, name and whole arguments).
    pub fn tool_calls(calls: &[ToolCall]) -> Self {
        Delta {
            tool_calls: calls
                .iter()
                .enumerate()
                .map(|(index, call)| WireToolCall {
                    index: Some(index),
                    ..WireToolCall::from(call)
                })
                .collect(),
            ..Delta::default()
        }
    }
}

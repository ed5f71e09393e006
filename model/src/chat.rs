//! The chat vocabulary every model speaks, local or remote: messages, tool definitions and
//! calls, `tool_choice`, token usage and why an answer ended. OpenAI-shaped, so the router's wire format
//! maps onto it one to one; the local engine (`stead-inference`) and the session actors
//! (through the binary's wiring) use the same types.

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
    /// Images the message shows the model, after its text (docs/multimodal.md). A route whose
    /// models see none refuses a request that carries any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
}

/// The media types an image may have (what every API that sees images takes).
pub const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// An image in a message: a `data:` URL carrying its bytes in base64, or an `https:` URL the
/// provider fetches itself (Stead never fetches one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub url: String,
    /// OpenAI's `detail` (`low`, `high`, `auto`), passed on where the API has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Image {
    /// An image from its bytes' base64 and their media type.
    pub fn base64(media_type: &str, base64: &str) -> Self {
        Image {
            url: format!("data:{media_type};base64,{base64}"),
            detail: None,
        }
    }

    /// A `data:` URL's media type and base64 payload; `None` for a remote URL (or a `data:`
    /// URL that is not base64).
    pub fn data(&self) -> Option<(&str, &str)> {
        let rest = self.url.strip_prefix("data:")?;
        let (header, payload) = rest.split_once(',')?;
        let media_type = header.strip_suffix(";base64")?;
        Some((media_type, payload))
    }
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            images: Vec::new(),
        }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }
}

impl crate::provider::RouterRequest {
    /// Whether any message shows an image.
    pub fn has_images(&self) -> bool {
        self.messages.iter().any(|m| !m.images.is_empty())
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

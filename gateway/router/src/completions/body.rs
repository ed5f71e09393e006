//! Bodies the router writes: requests to OpenAI-compatible providers, and answers to callers
//! as whole `chat.completion` objects or as stream chunks — built from the typed structs of
//! [`super::types`].

use serde::Serialize;
use serde_json::Value;

use super::types::{
    finish_reason_str, ChatCompletion, ChatCompletionChunk, ChunkChoice, CompletionChoice, Delta,
    ProviderRequest, StreamOptions, WireContent, WireMessage, WireTool, WireToolChoice, WireUsage,
};
use crate::chat::{ChatMessage, FinishReason, Role, ToolCall, ToolChoice, Usage};
use crate::provider::{Params, RouterRequest};

/// A wire struct as JSON (they hold only strings, numbers and JSON values: infallible).
fn value(body: impl Serialize) -> Value {
    serde_json::to_value(body).unwrap_or(Value::Null)
}

/// The body sent to an OpenAI-compatible provider.
///
/// Assistant tool calls carry their arguments as JSON strings and `content: null` when the
/// assistant said nothing besides them (strict servers require it). When `continue_from` is not
/// empty (mid-stream failover), the messages end with that partial assistant answer: servers
/// that support assistant prefill (vLLM, llama.cpp, most gateways) continue it; the router
/// removes the repetition when a server starts the answer over instead. A streamed call asks
/// for the usage chunk at the end (`stream_options.include_usage`).
pub fn provider_body(
    model: &str,
    request: &RouterRequest,
    max_tokens: Option<u32>,
    continue_from: &str,
    stream: bool,
) -> Value {
    let mut messages: Vec<WireMessage> = request.messages.iter().map(WireMessage::from).collect();
    if !continue_from.is_empty() {
        messages.push(WireMessage {
            role: Role::Assistant,
            content: Some(WireContent::Text(continue_from.to_string())),
            tool_calls: Vec::new(),
            tool_call_id: None,
        });
    }
    value(ProviderRequest {
        extra: request.extra.clone(),
        model: model.to_string(),
        messages,
        tools: request.tools.iter().map(WireTool::from).collect(),
        tool_choice: (!request.tools.is_empty())
            .then(|| WireToolChoice::from(&request.tool_choice)),
        params: Params {
            max_tokens,
            ..request.params.clone()
        },
        stream,
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
    })
}

/// One message in OpenAI's shape.
pub fn message_json(message: &ChatMessage) -> Value {
    value(WireMessage::from(message))
}

/// `tool_choice` in OpenAI's shape.
pub fn tool_choice_json(choice: &ToolChoice) -> Value {
    value(WireToolChoice::from(choice))
}

/// A whole (non-streamed) answer: a `chat.completion` object.
#[allow(clippy::too_many_arguments)]
pub fn completion_json(
    id: &str,
    created: i64,
    model: &str,
    text: &str,
    tool_calls: &[ToolCall],
    finish_reason: FinishReason,
    usage: &Usage,
) -> Value {
    let message = ChatMessage {
        tool_calls: tool_calls.to_vec(),
        ..ChatMessage::new(Role::Assistant, text)
    };
    value(ChatCompletion {
        id: id.to_string(),
        object: "chat.completion",
        created,
        model: model.to_string(),
        choices: vec![CompletionChoice {
            index: 0,
            message: WireMessage::from(&message),
            finish_reason: finish_reason_str(finish_reason),
            logprobs: None,
        }],
        usage: WireUsage::from(usage),
    })
}

/// One `chat.completion.chunk` of a streamed answer: `delta`, and `finish_reason` on the last.
pub fn chunk_json(
    id: &str,
    created: i64,
    model: &str,
    delta: Delta,
    finish_reason: Option<FinishReason>,
) -> Value {
    value(ChatCompletionChunk {
        id: id.to_string(),
        object: "chat.completion.chunk",
        created,
        model: model.to_string(),
        choices: vec![ChunkChoice {
            index: 0,
            delta,
            finish_reason: finish_reason.map(finish_reason_str),
            logprobs: None,
        }],
        usage: None,
    })
}

/// The closing usage chunk (`stream_options.include_usage`): no choices, only usage.
pub fn usage_chunk_json(id: &str, created: i64, model: &str, usage: &Usage) -> Value {
    value(ChatCompletionChunk {
        id: id.to_string(),
        object: "chat.completion.chunk",
        created,
        model: model.to_string(),
        choices: Vec::new(),
        usage: Some(WireUsage::from(usage)),
    })
}

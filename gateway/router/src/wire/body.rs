//! Bodies the router writes: requests to OpenAI-compatible providers, and answers to callers
//! as whole `chat.completion` objects or as stream chunks.

use serde_json::{json, Map, Value};

use crate::chat::{ChatMessage, FinishReason, Role, ToolCall, ToolChoice, Usage};
use crate::provider::RouterRequest;

pub(crate) fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
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
    let mut messages: Vec<Value> = request.messages.iter().map(message_json).collect();
    if !continue_from.is_empty() {
        messages.push(json!({ "role": "assistant", "content": continue_from }));
    }
    let mut body = Map::new();
    for (key, value) in &request.extra {
        body.insert(key.clone(), value.clone());
    }
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        body.insert(
            "tools".into(),
            request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": t.parameters,
                        }
                    })
                })
                .collect(),
        );
        body.insert("tool_choice".into(), tool_choice_json(&request.tool_choice));
    }
    let params = &request.params;
    if let Some(t) = params.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = params.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(n) = max_tokens {
        body.insert("max_tokens".into(), json!(n));
    }
    if !params.stop.is_empty() {
        body.insert("stop".into(), json!(params.stop));
    }
    if let Some(seed) = params.seed {
        body.insert("seed".into(), json!(seed));
    }
    body.insert("stream".into(), json!(stream));
    if stream {
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    Value::Object(body)
}

/// One message in OpenAI's shape.
pub fn message_json(message: &ChatMessage) -> Value {
    let mut out = json!({ "role": role_name(message.role) });
    if message.tool_calls.is_empty() {
        out["content"] = json!(message.content);
    } else {
        out["content"] = if message.content.is_empty() {
            Value::Null
        } else {
            json!(message.content)
        };
        out["tool_calls"] = tool_calls_json(&message.tool_calls);
    }
    if let Some(id) = &message.tool_call_id {
        out["tool_call_id"] = json!(id);
    }
    out
}

/// `tool_choice` in OpenAI's shape.
pub fn tool_choice_json(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Function(name) => json!({ "type": "function", "function": { "name": name } }),
    }
}

pub(crate) fn tool_calls_json(calls: &[ToolCall]) -> Value {
    calls
        .iter()
        .map(|c| {
            json!({
                "id": c.id,
                "type": "function",
                "function": { "name": c.name, "arguments": c.arguments },
            })
        })
        .collect()
}

pub fn finish_reason_str(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::Cancelled => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
    }
}

pub(crate) fn usage_json(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
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
    let mut message = json!({ "role": "assistant", "content": text });
    if !tool_calls.is_empty() {
        if text.is_empty() {
            message["content"] = Value::Null;
        }
        message["tool_calls"] = tool_calls_json(tool_calls);
    }
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason_str(finish_reason),
            "logprobs": null,
        }],
        "usage": usage_json(usage),
    })
}

/// One `chat.completion.chunk` of a streamed answer: `delta` as given, and `finish_reason`
/// on the last.
pub fn chunk_json(
    id: &str,
    created: i64,
    model: &str,
    delta: Value,
    finish_reason: Option<FinishReason>,
) -> Value {
    json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "delta": delta,
            "finish_reason": finish_reason.map(finish_reason_str),
            "logprobs": null,
        }],
    })
}

/// The closing usage chunk (`stream_options.include_usage`): no choices, only usage.
pub fn usage_chunk_json(id: &str, created: i64, model: &str, usage: &Usage) -> Value {
    json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage_json(usage),
    })
}

/// The tool calls of a finished streamed answer, as one delta (their index, id, name and whole
/// arguments).
pub fn tool_calls_delta(calls: &[ToolCall]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(index, c)| {
            json!({
                "index": index,
                "id": c.id,
                "type": "function",
                "function": { "name": c.name, "arguments": c.arguments },
            })
        })
        .collect();
    json!({ "tool_calls": calls })
}

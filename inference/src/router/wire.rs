//! OpenAI's chat completions wire format, both ways: requests that callers send to the router
//! (parsed into a [`RouterRequest`]) and that the router sends to OpenAI-compatible providers;
//! answers as whole JSON bodies and as server-sent-event chunks, and the fold of a provider's
//! event stream back into one answer ([`StreamAccumulator`]). Pure functions: tested without a
//! server.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::provider::{Params, RouterRequest};
use crate::{ChatMessage, FinishReason, Role, ToolCall, ToolChoice, ToolSpec, Usage};

/// The fields a request may carry that the router reads itself (everything else is passed on).
const KNOWN_FIELDS: [&str; 13] = [
    "model",
    "messages",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "stream",
    "stream_options",
    "n",
];

/// A parsed `/v1/chat/completions` body.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequest {
    pub request: RouterRequest,
    pub stream: bool,
    /// `stream_options.include_usage`: end the stream with a usage chunk.
    pub include_usage: bool,
}

/// Reads a chat completions request body. The error names the offending field.
pub fn parse_request(body: &Value) -> Result<ParsedRequest, String> {
    let object = body.as_object().ok_or("the body must be a JSON object")?;
    let route = object
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or("`model` must be a non-empty string (a route name; see GET /v1/models)")?
        .to_string();
    let messages = object
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("`messages` must be a non-empty array")?
        .iter()
        .enumerate()
        .map(|(i, m)| parse_message(m).map_err(|e| format!("messages[{i}]: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let tools = match object.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(tools)) => tools
            .iter()
            .enumerate()
            .map(|(i, t)| parse_tool(t).map_err(|e| format!("tools[{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err("`tools` must be an array".into()),
    };
    let tool_choice = match object.get("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(choice)) => match choice.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(format!(
                    "`tool_choice` `{other}` is not auto, none, required or a function"
                ))
            }
        },
        Some(choice) => match choice["function"]["name"].as_str() {
            Some(name) if choice["type"] == "function" => ToolChoice::Function(name.to_string()),
            _ => {
                return Err(
                    "`tool_choice` must be a string or {\"type\":\"function\",\"function\":{\"name\":…}}"
                        .into(),
                )
            }
        },
    };
    if let ToolChoice::Function(name) = &tool_choice {
        if !tools.iter().any(|t| &t.name == name) {
            return Err(format!(
                "`tool_choice` names `{name}`, which is not among `tools`"
            ));
        }
    }
    if matches!(tool_choice, ToolChoice::Required) && tools.is_empty() {
        return Err("`tool_choice` \"required\" needs `tools`".into());
    }
    match object.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(_) => return Err("`n` must be 1 (one choice per request)".into()),
    }
    let number = |key: &str, low: f64, high: f64| -> Result<Option<f32>, String> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if (low..=high).contains(&x) => Ok(Some(x as f32)),
                _ => Err(format!("`{key}` must be a number from {low} to {high}")),
            },
        }
    };
    let max_tokens = match object
        .get("max_completion_tokens")
        .filter(|v| !v.is_null())
        .or_else(|| object.get("max_tokens").filter(|v| !v.is_null()))
    {
        None => None,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=u32::MAX as u64).contains(&n) => Some(n as u32),
            _ => return Err("`max_tokens` must be a positive integer".into()),
        },
    };
    let stop = match object.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.iter().all(Value::is_string) && items.len() <= 4 => {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        }
        Some(_) => return Err("`stop` must be a string or up to 4 strings".into()),
    };
    let seed = match object.get("seed") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or("`seed` must be a non-negative integer")?),
    };
    let stream = match object.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("`stream` must be a boolean".into()),
    };
    let include_usage = object
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let extra: Map<String, Value> = object
        .iter()
        .filter(|(k, _)| !KNOWN_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(ParsedRequest {
        request: RouterRequest {
            route,
            messages,
            tools,
            tool_choice,
            params: Params {
                temperature: number("temperature", 0.0, 2.0)?,
                top_p: number("top_p", 0.0, 1.0)?,
                max_tokens,
                stop,
                seed,
            },
            extra,
        },
        stream,
        include_usage,
    })
}

fn parse_message(message: &Value) -> Result<ChatMessage, String> {
    let role = match message["role"].as_str() {
        Some("system") | Some("developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        _ => return Err("`role` must be system, developer, user, assistant or tool".into()),
    };
    let content = match &message["content"] {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text"), Some(piece)) => text.push_str(piece),
                    _ => return Err("only text content parts are supported".into()),
                }
            }
            text
        }
        _ => return Err("`content` must be a string, an array of text parts or null".into()),
    };
    let tool_calls = match &message["tool_calls"] {
        Value::Null => Vec::new(),
        Value::Array(calls) if role == Role::Assistant => calls
            .iter()
            .map(|call| {
                let name = call["function"]["name"]
                    .as_str()
                    .ok_or("a tool call needs `function.name`")?;
                let arguments = match &call["function"]["arguments"] {
                    Value::String(s) => s.clone(),
                    Value::Null => "{}".to_string(),
                    other => other.to_string(),
                };
                Ok(ToolCall {
                    id: call["id"].as_str().unwrap_or_default().to_string(),
                    name: name.to_string(),
                    arguments,
                })
            })
            .collect::<Result<Vec<_>, String>>()?,
        _ => return Err("`tool_calls` must be an array on an assistant message".into()),
    };
    let tool_call_id = match (role, message["tool_call_id"].as_str()) {
        (Role::Tool, Some(id)) => Some(id.to_string()),
        (Role::Tool, None) => return Err("a tool message needs `tool_call_id`".into()),
        _ => None,
    };
    Ok(ChatMessage {
        role,
        content,
        tool_calls,
        tool_call_id,
    })
}

fn parse_tool(tool: &Value) -> Result<ToolSpec, String> {
    if tool["type"] != "function" {
        return Err("`type` must be \"function\"".into());
    }
    let function = &tool["function"];
    let name = function["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or("`function.name` must be a non-empty string")?;
    let parameters = match &function["parameters"] {
        Value::Null => json!({ "type": "object", "properties": {} }),
        Value::Object(schema) => Value::Object(schema.clone()),
        _ => return Err("`function.parameters` must be a JSON schema object".into()),
    };
    Ok(ToolSpec {
        name: name.to_string(),
        description: function["description"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        parameters,
    })
}

fn role_name(role: Role) -> &'static str {
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

fn tool_calls_json(calls: &[ToolCall]) -> Value {
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

fn usage_json(usage: &Usage) -> Value {
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

/// A finished answer read from a whole `chat.completion` body.
pub fn parse_completion(body: &Value) -> Result<Folded, String> {
    let choice = body["choices"].get(0).ok_or("the answer has no choices")?;
    let message = &choice["message"];
    let mut tool_calls = Vec::new();
    if let Some(calls) = message["tool_calls"].as_array() {
        for (index, call) in calls.iter().enumerate() {
            let name = call["function"]["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| format!("tool call {index} has no name"))?;
            let arguments = match &call["function"]["arguments"] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            tool_calls.push(ToolCall {
                id: call["id"].as_str().unwrap_or_default().to_string(),
                name: name.to_string(),
                arguments: checked_arguments(name, &arguments, false)?,
            });
        }
    }
    let text = message["content"].as_str().unwrap_or_default().to_string();
    let finish = choice["finish_reason"].as_str().map(String::from);
    Ok(Folded {
        fragments: 0,
        usage: read_usage(&body["usage"]),
        model: body["model"]
            .as_str()
            .filter(|m| !m.is_empty())
            .map(String::from),
        finish_reason: finish_reason_of(finish.as_deref(), !tool_calls.is_empty()),
        text,
        tool_calls,
    })
}

fn read_usage(usage: &Value) -> Option<Usage> {
    usage.is_object().then(|| Usage {
        prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0) as usize,
        completion_tokens: usage["completion_tokens"].as_u64().unwrap_or(0) as usize,
    })
}

fn finish_reason_of(reason: Option<&str>, has_calls: bool) -> FinishReason {
    match reason {
        Some("length") => FinishReason::Length,
        Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
        _ if has_calls => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    }
}

/// Tool-call arguments as JSON text that parses (empty arguments are `{}`).
fn checked_arguments(name: &str, arguments: &str, cut: bool) -> Result<String, String> {
    if arguments.trim().is_empty() {
        return Ok("{}".into());
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(_) => Ok(arguments.to_string()),
        Err(e) => Err(format!(
            "the arguments of tool `{name}` are not valid JSON{}: {e}",
            if cut {
                " (the answer was cut off at max_tokens)"
            } else {
                ""
            }
        )),
    }
}

/// A provider's whole answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// The server's usage, when it sent one.
    pub usage: Option<Usage>,
    /// The model the server says answered.
    pub model: Option<String>,
    pub finish_reason: FinishReason,
    /// Content and tool-call deltas seen (a completion size when the server reports none).
    pub fragments: u64,
}

/// One tool call as its fragments arrive.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// What one piece of a stream held.
#[derive(Debug, Default, PartialEq)]
pub struct Fed {
    /// Text deltas, in order.
    pub text: Vec<String>,
    /// Tool-call fragments seen.
    pub tool_fragments: usize,
}

/// Folds a chat completions event stream, fed in whatever pieces the network delivers.
///
/// Lines end with `\n` or `\r\n`; `data:` lines make up an event, which a blank line ends.
/// Comments (`:` lines, used as keep-alives) and the other SSE fields are ignored, and so is
/// everything after `data: [DONE]`. Each chunk contributes its `choices[0].delta.content`, its
/// tool-call fragments (gathered by `index`: `id` and `function.name` as given, pieces of
/// `function.arguments` concatenated), its `usage` and its `model`.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    /// Bytes of a line whose end has not arrived yet.
    pending: Vec<u8>,
    /// The `data` of the event being read.
    data: Option<String>,
    text: String,
    fragments: u64,
    tool_calls: BTreeMap<u64, PartialCall>,
    usage: Option<Usage>,
    model: Option<String>,
    finish_reason: Option<String>,
    done: bool,
}

impl StreamAccumulator {
    /// Folds the next bytes of the body. An error (an unreadable chunk, or an error the server
    /// reported in the stream) ends the stream.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Fed, String> {
        let mut fed = Fed::default();
        if self.done {
            return Ok(fed);
        }
        let mut buffer = std::mem::take(&mut self.pending);
        buffer.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(newline) = buffer[start..].iter().position(|&b| b == b'\n') {
            let end = start + newline;
            let line = buffer[start..end]
                .strip_suffix(b"\r")
                .unwrap_or(&buffer[start..end]);
            self.line(line, &mut fed)?;
            start = end + 1;
            if self.done {
                return Ok(fed);
            }
        }
        buffer.drain(..start);
        self.pending = buffer;
        Ok(fed)
    }

    /// The body ended: folds a last line or event that lacked its line break or blank line.
    pub fn end(&mut self) -> Result<Fed, String> {
        self.feed(b"\n\n")
    }

    /// Whether `data: [DONE]` has arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Whether any text or tool-call fragment has arrived (the first one marks the TTFT).
    pub fn has_output(&self) -> bool {
        self.fragments > 0
    }

    /// The text received so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The whole answer. Fails when the stream stopped before the answer was finished (neither
    /// `[DONE]` nor a `finish_reason` arrived), or a tool call has no name or arguments that
    /// are not JSON.
    pub fn finish(mut self) -> Result<Folded, String> {
        self.end()?;
        if !self.done && self.finish_reason.is_none() {
            return Err("the stream ended before the answer was complete".into());
        }
        let cut = self.finish_reason.as_deref() == Some("length");
        let mut tool_calls = Vec::with_capacity(self.tool_calls.len());
        for (index, call) in std::mem::take(&mut self.tool_calls) {
            if call.name.is_empty() {
                return Err(format!("tool call {index} (id `{}`) has no name", call.id));
            }
            let arguments = checked_arguments(&call.name, &call.arguments, cut)?;
            tool_calls.push(ToolCall {
                id: call.id,
                name: call.name,
                arguments,
            });
        }
        Ok(Folded {
            finish_reason: finish_reason_of(self.finish_reason.as_deref(), !tool_calls.is_empty()),
            text: self.text,
            tool_calls,
            usage: self.usage,
            model: self.model,
            fragments: self.fragments,
        })
    }

    /// One line, without its line break.
    fn line(&mut self, line: &[u8], fed: &mut Fed) -> Result<(), String> {
        if line.is_empty() {
            return self.dispatch(fed);
        }
        let line = std::str::from_utf8(line).map_err(|_| "the stream is not UTF-8".to_string())?;
        if let Some(data) = line.strip_prefix("data:") {
            let data = data.strip_prefix(' ').unwrap_or(data);
            match &mut self.data {
                Some(event) => {
                    event.push('\n');
                    event.push_str(data);
                }
                None => self.data = Some(data.to_string()),
            }
        }
        Ok(())
    }

    /// The end of an event: folds its data.
    fn dispatch(&mut self, fed: &mut Fed) -> Result<(), String> {
        let Some(data) = self.data.take() else {
            return Ok(());
        };
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(&data)
            .map_err(|e| format!("unreadable stream chunk ({e}): {}", excerpt(&data)))?;
        self.chunk(&chunk, fed)
    }

    fn chunk(&mut self, chunk: &Value, fed: &mut Fed) -> Result<(), String> {
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string());
            return Err(format!("the stream reported an error: {message}"));
        }
        if let Some(model) = chunk.get("model").and_then(Value::as_str) {
            if !model.is_empty() {
                self.model = Some(model.to_string());
            }
        }
        if let Some(usage) = read_usage(&chunk["usage"]) {
            self.usage = Some(usage);
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            return Ok(());
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        let delta = &choice["delta"];
        if let Some(content) = delta.get("content").and_then(Value::as_str) {
            if !content.is_empty() {
                self.text.push_str(content);
                self.fragments += 1;
                fed.text.push(content.to_string());
            }
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (position, call) in calls.iter().enumerate() {
                // Servers that leave out `index` send whole calls, one per array slot.
                let index = call
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(position as u64);
                let partial = self.tool_calls.entry(index).or_default();
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    if !id.is_empty() {
                        partial.id = id.to_string();
                    }
                }
                let function = &call["function"];
                if let Some(name) = function.get("name").and_then(Value::as_str) {
                    if !name.is_empty() {
                        partial.name = name.to_string();
                    }
                }
                if let Some(arguments) = function.get("arguments").and_then(Value::as_str) {
                    partial.arguments.push_str(arguments);
                }
                self.fragments += 1;
                fed.tool_fragments += 1;
            }
        }
        Ok(())
    }
}

/// The start of a text, for error messages.
pub fn excerpt(text: &str) -> String {
    text.trim().chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(chunk: Value) -> String {
        format!("data: {chunk}\n\n")
    }

    fn content(text: &str) -> String {
        event(json!({
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "gpt-test-0613",
            "choices": [{ "index": 0, "delta": { "content": text }, "finish_reason": null }],
        }))
    }

    fn finish_reason(reason: &str) -> String {
        event(json!({
            "model": "gpt-test-0613",
            "choices": [{ "index": 0, "delta": {}, "finish_reason": reason }],
        }))
    }

    fn tool_fragment(fragment: Value) -> String {
        event(json!({
            "model": "gpt-test-0613",
            "choices": [{
                "index": 0,
                "delta": { "tool_calls": [fragment] },
                "finish_reason": null,
            }],
        }))
    }

    /// Feeds `body` one byte at a time: every line and event boundary falls between feeds.
    fn feed_bytewise(body: &str) -> (Vec<String>, Result<Folded, String>) {
        let mut stream = StreamAccumulator::default();
        let mut pieces = Vec::new();
        for byte in body.as_bytes() {
            pieces.extend(stream.feed(std::slice::from_ref(byte)).unwrap().text);
        }
        (pieces, stream.finish())
    }

    #[test]
    fn text_deltas_survive_a_chunk_boundary_inside_a_data_line() {
        let body = [
            ": keep-alive\n\n".to_string(),
            event(json!({
                "model": "gpt-test-0613",
                "choices": [{
                    "index": 0,
                    "delta": { "role": "assistant", "content": "" },
                    "finish_reason": null,
                }],
            })),
            content("Hello"),
            content(" wörld"),
            finish_reason("stop"),
            event(json!({
                "model": "gpt-test-0613",
                "choices": [],
                "usage": { "prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14 },
            })),
            "data: [DONE]\n\n".to_string(),
            // Anything after [DONE] is ignored.
            "data: {not json\n\n".to_string(),
        ]
        .concat();
        let split = body.find("Hello").unwrap() + 2;
        let (first, second) = body.as_bytes().split_at(split);

        let mut stream = StreamAccumulator::default();
        assert_eq!(stream.feed(first).unwrap().text, Vec::<String>::new());
        assert!(!stream.has_output());
        assert_eq!(stream.feed(second).unwrap().text, vec!["Hello", " wörld"]);
        assert!(stream.is_done());
        assert_eq!(
            stream.finish().unwrap(),
            Folded {
                text: "Hello wörld".into(),
                tool_calls: Vec::new(),
                usage: Some(Usage {
                    prompt_tokens: 12,
                    completion_tokens: 2,
                }),
                model: Some("gpt-test-0613".into()),
                finish_reason: FinishReason::Stop,
                fragments: 2,
            }
        );

        // The same body split at every byte (a multi-byte character included) and with CRLF
        // line endings folds the same way.
        let (pieces, answer) = feed_bytewise(&body.replace('\n', "\r\n"));
        assert_eq!(pieces, vec!["Hello", " wörld"]);
        assert_eq!(answer.unwrap().text, "Hello wörld");
    }

    #[test]
    fn tool_call_arguments_are_joined_from_their_fragments() {
        let body = [
            tool_fragment(json!({
                "index": 0,
                "id": "call_abc",
                "type": "function",
                "function": { "name": "get_weather", "arguments": "" },
            })),
            tool_fragment(json!({ "index": 0, "function": { "arguments": "{\"ci" } })),
            tool_fragment(json!({ "index": 0, "function": { "arguments": "ty\": \"Pa" } })),
            tool_fragment(json!({ "index": 0, "function": { "arguments": "ris\"}" } })),
            finish_reason("tool_calls"),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat();
        let (pieces, answer) = feed_bytewise(&body);
        assert!(pieces.is_empty());
        assert_eq!(
            answer.unwrap(),
            Folded {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call_abc".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\": \"Paris\"}".into(),
                }],
                // No usage chunk: the provider counts one token per fragment.
                usage: None,
                model: Some("gpt-test-0613".into()),
                finish_reason: FinishReason::ToolCalls,
                fragments: 4,
            }
        );
    }

    #[test]
    fn parallel_tool_calls_are_kept_apart_by_index() {
        let body = [
            content("Let me look."),
            tool_fragment(json!({
                "index": 0,
                "id": "call_1",
                "function": { "name": "get_weather", "arguments": "{\"city\":" },
            })),
            tool_fragment(json!({
                "index": 1,
                "id": "call_2",
                "function": { "name": "get_time", "arguments": "" },
            })),
            tool_fragment(json!({ "index": 0, "function": { "arguments": "\"Rome\"}" } })),
            finish_reason("tool_calls"),
        ]
        .concat();
        let mut stream = StreamAccumulator::default();
        assert_eq!(
            stream.feed(body.as_bytes()).unwrap().text,
            vec!["Let me look."]
        );
        // No [DONE], but the answer was finished.
        let answer = stream.finish().unwrap();
        assert_eq!(answer.text, "Let me look.");
        assert_eq!(
            answer
                .tool_calls
                .iter()
                .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
                .collect::<Vec<_>>(),
            vec![
                ("call_1", "get_weather", "{\"city\":\"Rome\"}"),
                ("call_2", "get_time", "{}"),
            ]
        );
    }

    #[test]
    fn invalid_tool_arguments_name_the_tool() {
        let body = [
            tool_fragment(json!({
                "index": 0,
                "id": "call_1",
                "function": { "name": "get_weather", "arguments": "{\"city\": \"Par" },
            })),
            finish_reason("length"),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat();
        let mut stream = StreamAccumulator::default();
        stream.feed(body.as_bytes()).unwrap();
        let error = stream.finish().unwrap_err();
        assert!(error.contains("`get_weather`"), "{error}");
        assert!(error.contains("max_tokens"), "{error}");
    }

    #[test]
    fn a_stream_cut_short_is_an_error() {
        let mut stream = StreamAccumulator::default();
        stream.feed(content("Hel").as_bytes()).unwrap();
        let error = stream.finish().unwrap_err();
        assert!(error.contains("ended before"), "{error}");
    }

    #[test]
    fn a_last_event_without_its_blank_line_is_still_read() {
        let mut stream = StreamAccumulator::default();
        let body = format!("{}{}", content("Hi"), finish_reason("stop"));
        let body = body.trim_end();
        assert_eq!(stream.feed(body.as_bytes()).unwrap().text, vec!["Hi"]);
        assert!(stream.end().unwrap().text.is_empty());
        assert_eq!(stream.finish().unwrap().text, "Hi");
    }

    #[test]
    fn errors_in_the_stream_end_it() {
        let mut stream = StreamAccumulator::default();
        let body = event(json!({ "error": { "message": "overloaded", "type": "server_error" } }));
        let error = stream.feed(body.as_bytes()).unwrap_err();
        assert!(error.contains("overloaded"), "{error}");

        let mut stream = StreamAccumulator::default();
        let error = stream.feed(b"data: {\"choices\": [\n\n").unwrap_err();
        assert!(error.contains("unreadable"), "{error}");
    }

    #[test]
    fn a_request_body_parses_with_its_tools_and_options_and_extra_fields_pass_through() {
        let body = json!({
            "model": "default",
            "messages": [
                { "role": "developer", "content": [{ "type": "text", "text": "Be " }, { "type": "text", "text": "brief." }] },
                { "role": "user", "content": "Weather?" },
                { "role": "assistant", "content": null, "tool_calls": [
                    { "id": "c1", "type": "function", "function": { "name": "w", "arguments": "{\"city\":\"Oslo\"}" } }
                ] },
                { "role": "tool", "tool_call_id": "c1", "content": "cold" },
            ],
            "tools": [{ "type": "function", "function": { "name": "w", "parameters": { "type": "object" } } }],
            "tool_choice": { "type": "function", "function": { "name": "w" } },
            "max_completion_tokens": 20,
            "temperature": 0.5,
            "stop": "END",
            "stream": true,
            "stream_options": { "include_usage": true },
            "response_format": { "type": "text" },
        });
        let parsed = parse_request(&body).unwrap();
        assert!(parsed.stream && parsed.include_usage);
        let request = &parsed.request;
        assert_eq!(request.route, "default");
        assert_eq!(request.messages[0].role, Role::System);
        assert_eq!(request.messages[0].content, "Be brief.");
        assert_eq!(
            request.messages[2].tool_calls[0].arguments,
            "{\"city\":\"Oslo\"}"
        );
        assert_eq!(request.messages[3].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(request.tool_choice, ToolChoice::Function("w".into()));
        assert_eq!(request.params.max_tokens, Some(20));
        assert_eq!(request.params.stop, vec!["END".to_string()]);
        assert_eq!(request.extra["response_format"], json!({ "type": "text" }));
        // Sent on to a provider: the extra field, the route's model, the tools.
        let sent = provider_body("gpt-x", request, Some(20), "", false);
        assert_eq!(sent["model"], "gpt-x");
        assert_eq!(sent["response_format"], json!({ "type": "text" }));
        assert_eq!(
            sent["tool_choice"],
            json!({ "type": "function", "function": { "name": "w" } })
        );
        assert_eq!(sent["messages"][2]["content"], Value::Null);
    }

    #[test]
    fn bad_request_bodies_name_the_field() {
        for (body, field) in [
            (
                json!({ "messages": [{ "role": "user", "content": "x" }] }),
                "`model`",
            ),
            (json!({ "model": "m", "messages": [] }), "`messages`"),
            (
                json!({ "model": "m", "messages": [{ "role": "robot", "content": "x" }] }),
                "messages[0]",
            ),
            (
                json!({ "model": "m", "messages": [{ "role": "user", "content": "x" }], "temperature": 9 }),
                "`temperature`",
            ),
            (
                json!({ "model": "m", "messages": [{ "role": "user", "content": "x" }], "n": 2 }),
                "`n`",
            ),
            (
                json!({ "model": "m", "messages": [{ "role": "user", "content": "x" }], "tool_choice": "required" }),
                "`tool_choice`",
            ),
            (
                json!({ "model": "m", "messages": [{ "role": "tool", "content": "x" }] }),
                "tool_call_id",
            ),
        ] {
            let error = parse_request(&body).unwrap_err();
            assert!(error.contains(field), "{body}: {error}");
        }
    }

    #[test]
    fn a_continuation_ends_with_the_partial_answer() {
        let request = RouterRequest {
            route: "r".into(),
            messages: vec![ChatMessage::user("Count to five.")],
            ..Default::default()
        };
        let body = provider_body("m", &request, None, "one, two,", true);
        assert_eq!(
            body["messages"],
            json!([
                { "role": "user", "content": "Count to five." },
                { "role": "assistant", "content": "one, two," },
            ])
        );
        assert!(body.get("max_tokens").is_none() && body.get("tools").is_none());
    }
}

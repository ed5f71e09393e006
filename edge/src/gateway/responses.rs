//! OpenAI's Responses API on the model router, stateless: `POST /v1/responses` (docs/gateway.md)
//! over any route, logged, cached, limited and budgeted like chat completions. `model` names a
//! route. Nothing is stored: `previous_response_id` is refused, `store` is answered `false`,
//! and a conversation is carried by sending its items again.
//!
//! Understood: `input` (a string, or items: messages with `input_text`/`output_text` parts,
//! `function_call` and `function_call_output`; `reasoning` items are skipped), `instructions`,
//! `tools` of type `function`, `tool_choice`, `max_output_tokens`, `temperature`, `top_p`,
//! `stream`; `input_image` parts in user messages (`image_url` a base64 `data:` URL or an `https:`
//! URL, docs/multimodal.md). Files (`file_id`) and built-in tools are refused; `metadata` is echoed; other fields
//! are ignored. Errors use Stead's envelope (`{"error":{"code","message"}}`), which the
//! OpenAI clients read.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::Response;
use serde_json::{json, Map, Value};
use stead_router::chat::FinishReason;
use stead_router::completions::{self, FormatError};
use stead_router::RouterResponse;
use uuid::Uuid;

use super::streamed::{self, Refused, Step};
use super::{answer_json, options, router_error};
use crate::auth::Caller;
use crate::views::ErrorBody;
use crate::{ApiError, ApiJson, AppState, ErrorCode};

/// The request as an OpenAI chat completions body, which the router's parser then checks.
pub(crate) fn openai_body(body: &Value) -> Result<Value, FormatError> {
    let object = body.as_object().ok_or("the body must be a JSON object")?;
    if object
        .get("previous_response_id")
        .is_some_and(|v| !v.is_null())
    {
        return Err(
            "`previous_response_id` is not supported: Stead's responses are stateless \
                    (store nothing); send the conversation's items in `input`"
                .into(),
        );
    }
    let mut messages = Vec::new();
    if let Some(instructions) = object.get("instructions").filter(|v| !v.is_null()) {
        let text = instructions
            .as_str()
            .ok_or("`instructions` must be a string")?;
        messages.push(json!({ "role": "system", "content": text }));
    }
    match object.get("input") {
        Some(Value::String(text)) => messages.push(json!({ "role": "user", "content": text })),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                convert_item(item, &mut messages).map_err(|e| e.within(format!("input[{i}]")))?;
            }
        }
        _ => return Err("`input` must be a string or an array of items".into()),
    }
    let mut out = Map::new();
    out.insert("messages".into(), Value::Array(messages));
    for key in ["model", "temperature", "top_p", "stream"] {
        if let Some(value) = object.get(key) {
            out.insert(key.into(), value.clone());
        }
    }
    if let Some(max) = object.get("max_output_tokens").filter(|v| !v.is_null()) {
        out.insert("max_tokens".into(), max.clone());
    }
    if let Some(tools) = object.get("tools").filter(|t| !t.is_null()) {
        let tools = tools.as_array().ok_or("`tools` must be an array")?;
        let tools = tools
            .iter()
            .enumerate()
            .map(|(i, tool)| match (tool["type"].as_str(), tool["name"].as_str()) {
                (Some("function"), Some(name)) => Ok(json!({
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": tool["description"].as_str().unwrap_or_default(),
                        "parameters": tool.get("parameters").filter(|p| !p.is_null()).cloned().unwrap_or(json!({"type": "object"})),
                    },
                })),
                (Some("function"), None) => Err(format!("tools[{i}]: `name` must be a string").into()),
                (kind, _) => Err(format!(
                    "tools[{i}]: only `function` tools are supported, not {}",
                    kind.unwrap_or("a tool without `type`")
                ).into()),
            })
            .collect::<Result<Vec<_>, FormatError>>()?;
        out.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = object.get("tool_choice").filter(|c| !c.is_null()) {
        let choice = match choice {
            Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => {
                choice.clone()
            }
            _ => match (choice["type"].as_str(), choice["name"].as_str()) {
                (Some("function"), Some(name)) => {
                    json!({ "type": "function", "function": { "name": name } })
                }
                _ => {
                    return Err("`tool_choice` must be \"auto\", \"none\", \"required\" or \
                                {\"type\":\"function\",\"name\":…}"
                        .into())
                }
            },
        };
        out.insert("tool_choice".into(), choice);
    }
    Ok(Value::Object(out))
}

/// A message's parts: its text, and its images as chat `image_url` parts.
fn message_parts(parts: &[Value], role: &str) -> Result<(String, Vec<Value>), FormatError> {
    let mut text = String::new();
    let mut images = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        match (part["type"].as_str(), part["text"].as_str()) {
            (Some("input_text" | "output_text" | "text"), Some(piece)) => text.push_str(piece),
            (Some("refusal"), _) => text.push_str(part["refusal"].as_str().unwrap_or_default()),
            (Some("input_image"), _) if role == "user" => {
                let within = |e: FormatError| e.within(format!("content[{j}] (input_image)"));
                let url = part["image_url"]
                    .as_str()
                    .ok_or_else(|| within("`image_url` must be a URL (`file_id` is not supported)".into()))?;
                let image = completions::parse_image_url(url).map_err(within)?;
                let mut image_url = json!({ "url": image.url });
                if let Some(detail) = part["detail"].as_str() {
                    image_url["detail"] = json!(detail);
                }
                images.push(json!({ "type": "image_url", "image_url": image_url }));
            }
            (kind, _) => {
                return Err(format!(
                    "content[{j}]: `{}` parts are not supported here (text parts, and input_image in user messages, are)",
                    kind.unwrap_or("untyped")
                )
                .into())
            }
        }
    }
    Ok((text, images))
}

/// One input item as chat messages. Consecutive `function_call`s join one assistant message
/// (with the assistant's text before them, if any).
fn convert_item(item: &Value, out: &mut Vec<Value>) -> Result<(), FormatError> {
    let kind = item["type"]
        .as_str()
        .unwrap_or(if item.get("role").is_some() {
            "message"
        } else {
            ""
        });
    match kind {
        "message" => {
            let role = match item["role"].as_str() {
                Some("developer") => "system",
                Some(role @ ("user" | "assistant" | "system")) => role,
                _ => return Err("`role` must be user, assistant, system or developer".into()),
            };
            let (text, images) = match &item["content"] {
                Value::String(text) => (text.clone(), Vec::new()),
                Value::Array(parts) => message_parts(parts, role)?,
                _ => return Err("`content` must be a string or an array of parts".into()),
            };
            if images.is_empty() {
                out.push(json!({ "role": role, "content": text }));
            } else {
                let mut parts = vec![json!({ "type": "text", "text": text })];
                parts.extend(images);
                out.push(json!({ "role": role, "content": parts }));
            }
        }
        "function_call" => {
            let (Some(call_id), Some(name)) = (item["call_id"].as_str(), item["name"].as_str())
            else {
                return Err("a function_call needs `call_id` and `name`".into());
            };
            let arguments = match &item["arguments"] {
                Value::String(text) => text.clone(),
                Value::Null => "{}".into(),
                other => other.to_string(),
            };
            let call = json!({ "id": call_id, "type": "function", "function": { "name": name, "arguments": arguments } });
            match out.last_mut() {
                Some(last) if last["role"] == "assistant" => {
                    match last["tool_calls"].as_array_mut() {
                        Some(calls) => calls.push(call),
                        None => last["tool_calls"] = json!([call]),
                    }
                }
                _ => out.push(json!({ "role": "assistant", "content": "", "tool_calls": [call] })),
            }
        }
        "function_call_output" => {
            let call_id = item["call_id"]
                .as_str()
                .ok_or("a function_call_output needs `call_id`")?;
            let output = match &item["output"] {
                Value::String(text) => text.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(""),
                other => other.to_string(),
            };
            out.push(json!({ "role": "tool", "tool_call_id": call_id, "content": output }));
        }
        "reasoning" => {}
        other => {
            return Err(format!(
            "`{other}` items are not supported (message, function_call, function_call_output are)"
        )
            .into())
        }
    }
    Ok(())
}

/// What a response echoes of its request.
struct Echo {
    id: String,
    created: i64,
    model: String,
    instructions: Value,
    tools: Value,
    tool_choice: Value,
    metadata: Value,
    max_output_tokens: Value,
    temperature: Value,
    top_p: Value,
}

impl Echo {
    fn new(id: Uuid, body: &Value) -> Self {
        let field = |key: &str| body.get(key).cloned().unwrap_or(Value::Null);
        Echo {
            id: format!("resp_{}", id.simple()),
            created: chrono::Utc::now().timestamp(),
            model: body["model"].as_str().unwrap_or_default().to_string(),
            instructions: field("instructions"),
            tools: body
                .get("tools")
                .cloned()
                .filter(|t| !t.is_null())
                .unwrap_or(json!([])),
            tool_choice: body
                .get("tool_choice")
                .cloned()
                .filter(|t| !t.is_null())
                .unwrap_or(json!("auto")),
            metadata: body
                .get("metadata")
                .cloned()
                .filter(|t| !t.is_null())
                .unwrap_or(json!({})),
            max_output_tokens: field("max_output_tokens"),
            temperature: field("temperature"),
            top_p: field("top_p"),
        }
    }

    /// The response object with `status` and `output` (and `usage` once done).
    fn response(&self, status: &str, output: Vec<Value>, answer: Option<&RouterResponse>) -> Value {
        let incomplete = answer
            .filter(|a| a.finish_reason == FinishReason::Length)
            .map(|_| json!({ "reason": "max_output_tokens" }));
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": if incomplete.is_some() { "incomplete" } else { status },
            "error": null,
            "incomplete_details": incomplete,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": true,
            "previous_response_id": null,
            "store": false,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "text": { "format": { "type": "text" } },
            "tool_choice": self.tool_choice,
            "tools": self.tools,
            "truncation": "disabled",
            "metadata": self.metadata,
            "usage": answer.map(|a| json!({
                "input_tokens": a.usage.prompt_tokens,
                "input_tokens_details": { "cached_tokens": 0 },
                "output_tokens": a.usage.completion_tokens,
                "output_tokens_details": { "reasoning_tokens": 0 },
                "total_tokens": a.usage.prompt_tokens + a.usage.completion_tokens,
            })),
        })
    }
}

fn message_item(id: &str, status: &str, text: Option<&str>) -> Value {
    let content = match text {
        Some(text) => {
            json!([{ "type": "output_text", "text": text, "annotations": [], "logprobs": [] }])
        }
        None => json!([]),
    };
    json!({ "type": "message", "id": id, "status": status, "role": "assistant", "content": content })
}

fn call_item(
    id: &str,
    status: &str,
    call: &stead_router::chat::ToolCall,
    arguments: &str,
) -> Value {
    json!({ "type": "function_call", "id": id, "call_id": call.id, "name": call.name, "arguments": arguments, "status": status })
}

/// The whole answer's output items: its text as one message, then its function calls.
fn output(response_id: &str, answer: &RouterResponse) -> Vec<Value> {
    let mut items = Vec::new();
    if !answer.text.is_empty() || answer.tool_calls.is_empty() {
        items.push(message_item(
            &format!("msg_{response_id}"),
            "completed",
            Some(&answer.text),
        ));
    }
    for (i, call) in answer.tool_calls.iter().enumerate() {
        items.push(call_item(
            &format!("fc_{response_id}_{i}"),
            "completed",
            call,
            &call.arguments,
        ));
    }
    items
}

/// OpenAI Responses through the model router (`model` names a route), stateless.
#[utoipa::path(post, path = "/v1/responses", request_body(content = Object, description = "An OpenAI Responses request; `model` names a route (GET /v1/models). Stateless: nothing is stored."), responses((status = 200, description = "A `response`, or `text/event-stream` events when `stream` is true"), (status = 400, body = ErrorBody), (status = 404, description = "No such route", body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, description = "Rate limit or budget; see Retry-After", body = ErrorBody), (status = 502, description = "Every target failed", body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn responses(
    State(state): State<AppState>,
    Caller(caller): Caller,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    caller.require_operator()?;
    let parsed = openai_body(&body)
        .and_then(|b| completions::parse_request(&b))
        .map_err(|e| ApiError::new(ErrorCode::MalformedRequest, e.to_string()))?;
    let mut options = options(&caller, &headers, &parsed.request.route)?;
    let id = *options.request_id.get_or_insert_with(Uuid::now_v7);
    let echo = Echo::new(id, &body);
    let short = id.simple().to_string();
    if !parsed.stream {
        return Ok(
            match state.model_router.call(parsed.request, options, None).await {
                Ok(answer) => answer_json(
                    echo.response("completed", output(&short, &answer), Some(&answer)),
                    &answer,
                ),
                Err(error) => router_error(&error),
            },
        );
    }
    let streamed = match streamed::start(state.model_router.clone(), parsed.request, options).await
    {
        Ok(streamed) => streamed,
        Err(Refused::Router(error)) => return Ok(router_error(&error)),
        Err(Refused::Internal(error)) => return Err(error),
    };
    let mut sequence = 0u64;
    let mut started = false;
    let mut text = String::new();
    let message_id = format!("msg_{short}");
    let response = streamed::sse(streamed, id, move |step| {
        let mut events = Vec::new();
        let mut emit = |mut data: Value| {
            data["sequence_number"] = json!(sequence);
            sequence += 1;
            let kind = data["type"].as_str().unwrap_or_default().to_string();
            events.push(Event::default().event(kind).data(data.to_string()));
        };
        if !std::mem::replace(&mut started, true) {
            let created = echo.response("in_progress", Vec::new(), None);
            emit(json!({ "type": "response.created", "response": created }));
            emit(json!({ "type": "response.in_progress", "response": created }));
        }
        let open_text = |emit: &mut dyn FnMut(Value)| {
            emit(
                json!({ "type": "response.output_item.added", "output_index": 0, "item": message_item(&message_id, "in_progress", None) }),
            );
            emit(
                json!({ "type": "response.content_part.added", "item_id": message_id, "output_index": 0, "content_index": 0, "part": { "type": "output_text", "text": "", "annotations": [], "logprobs": [] } }),
            );
        };
        match step {
            Step::Text(delta) => {
                if text.is_empty() {
                    open_text(&mut emit);
                }
                text.push_str(&delta);
                emit(
                    json!({ "type": "response.output_text.delta", "item_id": message_id, "output_index": 0, "content_index": 0, "delta": delta, "logprobs": [] }),
                );
            }
            Step::Done(result) => match *result {
                Ok(answer) => {
                    let has_message = !answer.text.is_empty() || answer.tool_calls.is_empty();
                    if has_message {
                        if text.is_empty() {
                            open_text(&mut emit);
                        }
                        let part = json!({ "type": "output_text", "text": answer.text, "annotations": [], "logprobs": [] });
                        emit(
                            json!({ "type": "response.output_text.done", "item_id": message_id, "output_index": 0, "content_index": 0, "text": answer.text, "logprobs": [] }),
                        );
                        emit(
                            json!({ "type": "response.content_part.done", "item_id": message_id, "output_index": 0, "content_index": 0, "part": part }),
                        );
                        emit(
                            json!({ "type": "response.output_item.done", "output_index": 0, "item": message_item(&message_id, "completed", Some(&answer.text)) }),
                        );
                    }
                    let first = usize::from(has_message);
                    for (i, call) in answer.tool_calls.iter().enumerate() {
                        let item_id = format!("fc_{short}_{i}");
                        let index = first + i;
                        emit(
                            json!({ "type": "response.output_item.added", "output_index": index, "item": call_item(&item_id, "in_progress", call, "") }),
                        );
                        emit(
                            json!({ "type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": index, "delta": call.arguments }),
                        );
                        emit(
                            json!({ "type": "response.function_call_arguments.done", "item_id": item_id, "output_index": index, "name": call.name, "arguments": call.arguments }),
                        );
                        emit(
                            json!({ "type": "response.output_item.done", "output_index": index, "item": call_item(&item_id, "completed", call, &call.arguments) }),
                        );
                    }
                    let done = echo.response("completed", output(&short, &answer), Some(&answer));
                    let kind = if done["status"] == "incomplete" {
                        "response.incomplete"
                    } else {
                        "response.completed"
                    };
                    emit(json!({ "type": kind, "response": done }));
                }
                Err(error) => {
                    let mut failed = echo.response("failed", Vec::new(), None);
                    failed["error"] = json!({ "code": error.code, "message": error.message });
                    emit(json!({ "type": "response.failed", "response": failed }));
                }
            },
        }
        events
    });
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_items_become_chat_messages() {
        let body = json!({
            "model": "default",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": "Time?"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "c1", "name": "clock", "arguments": "{\"tz\":\"UTC\"}"},
                {"type": "function_call", "call_id": "c2", "name": "clock", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "12:00"},
                {"type": "function_call_output", "call_id": "c2", "output": "13:00"},
                {"type": "reasoning", "summary": []}
            ],
            "tools": [{"type": "function", "name": "clock", "description": "the time", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "clock"},
            "max_output_tokens": 50,
            "store": true
        });
        assert_eq!(
            openai_body(&body).unwrap(),
            json!({
                "model": "default",
                "max_tokens": 50,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Time?"},
                    {"role": "assistant", "content": "Checking.", "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "clock", "arguments": "{\"tz\":\"UTC\"}"}},
                        {"id": "c2", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
                    {"role": "tool", "tool_call_id": "c2", "content": "13:00"}
                ],
                "tools": [{"type": "function", "function": {"name": "clock", "description": "the time", "parameters": {"type": "object"}}}],
                "tool_choice": {"type": "function", "function": {"name": "clock"}}
            })
        );
        assert!(completions::parse_request(&openai_body(&body).unwrap()).is_ok());
    }

    #[test]
    fn unsupported_input_is_refused_with_a_reason() {
        let cases = [
            (
                json!({"model": "m", "input": "x", "previous_response_id": "resp_1"}),
                "stateless",
            ),
            (json!({"model": "m"}), "input"),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
                "input_image",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}),
                "web_search",
            ),
            (
                json!({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}),
                "item_reference",
            ),
        ];
        for (body, needle) in cases {
            let error = openai_body(&body).unwrap_err();
            assert!(error.message().contains(needle), "{error}");
        }
    }
}

//! Anthropic's Messages API on the model router: `POST /v1/messages` (docs/gateway.md), so that
//! code written for Anthropic's clients runs against any route — the local engine, `openai` or
//! `anthropic` providers — logged, cached, limited and budgeted like chat completions. `model`
//! names a route. The key may come as `x-api-key` (what Anthropic's clients send) or as a
//! Bearer; every error, authentication's included, answers in Anthropic's envelope
//! (`{"type":"error","error":{"type","message"}}`), with Stead's own code beside it.
//!
//! Understood: `system` (text or text blocks), `messages` with text, `tool_use` and
//! `tool_result` blocks, `tools`, `tool_choice` (`auto`, `any`, `tool`, `none`), `max_tokens`,
//! `temperature`, `top_p`, `stop_sequences`, `stream`; `image` blocks in user turns (a `base64`
//! or `url` source, docs/multimodal.md). Documents are refused;
//! `metadata`, `top_k`, `thinking` and other fields are ignored.

use axum::body::Body;
use axum::extract::{FromRequest, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use stead_router::chat::ToolCall;
use stead_router::completions::{self, FormatError};
use stead_router::providers::anthropic::{stop_reason, tool_input};
use stead_router::{RouterError, RouterResponse};
use uuid::Uuid;

use super::streamed::{self, Refused, Step};
use super::{answer_json, options, router_error};
use crate::auth::Caller;
use crate::{ApiError, ApiJson, AppState, ErrorCode};

/// Anthropic's error `type` for an HTTP status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        503 => "overloaded_error",
        _ => "api_error",
    }
}

fn envelope(status: StatusCode, code: &str, message: &str) -> Value {
    json!({
        "type": "error",
        "error": { "type": error_type(status), "message": message, "code": code },
    })
}

/// A Stead error in Anthropic's envelope.
fn refusal(error: ApiError) -> Response {
    let status = error.status();
    let body = envelope(status, error.code.as_str(), &error.message);
    (status, Json(body)).into_response()
}

/// A router error (keeps `Retry-After` and `x-stead-request-id`) in Anthropic's envelope.
fn router_refusal(error: &RouterError) -> Response {
    let mut response = router_error(error);
    let status = response.status();
    let code: ErrorCode = error.code.into();
    *response.body_mut() = Body::from(envelope(status, code.as_str(), &error.message).to_string());
    response
}

/// The request as an OpenAI chat completions body, which the router's parser then checks.
pub(crate) fn openai_body(body: &Value) -> Result<Value, FormatError> {
    let object = body.as_object().ok_or("the body must be a JSON object")?;
    match object.get("max_tokens") {
        Some(v) if v.as_u64().is_some_and(|n| n >= 1) => {}
        _ => return Err("`max_tokens` must be a positive integer (it is required)".into()),
    }
    let mut messages = Vec::new();
    match object.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => messages.push(json!({ "role": "system", "content": text })),
        Some(Value::Array(blocks)) => {
            let text = blocks
                .iter()
                .map(|b| match (b["type"].as_str(), b["text"].as_str()) {
                    (Some("text"), Some(text)) => Ok(text),
                    _ => Err("`system` blocks must be text blocks".to_string()),
                })
                .collect::<Result<Vec<_>, _>>()?
                .join("\n\n");
            messages.push(json!({ "role": "system", "content": text }));
        }
        Some(_) => return Err("`system` must be a string or an array of text blocks".into()),
    }
    let turns = object
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("`messages` must be a non-empty array")?;
    for (i, turn) in turns.iter().enumerate() {
        convert_turn(turn, &mut messages).map_err(|e| e.within(format!("messages[{i}]")))?;
    }
    let mut out = Map::new();
    out.insert("messages".into(), Value::Array(messages));
    for key in ["model", "max_tokens", "temperature", "top_p", "stream"] {
        if let Some(value) = object.get(key) {
            out.insert(key.into(), value.clone());
        }
    }
    if let Some(stop) = object.get("stop_sequences") {
        out.insert("stop".into(), stop.clone());
    }
    if let Some(tools) = object.get("tools").filter(|t| !t.is_null()) {
        let tools = tools.as_array().ok_or("`tools` must be an array")?;
        let tools = tools
            .iter()
            .enumerate()
            .map(|(i, tool)| {
                let name = tool["name"]
                    .as_str()
                    .ok_or(format!("tools[{i}]: `name` must be a string"))?;
                Ok(json!({
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": tool["description"].as_str().unwrap_or_default(),
                        "parameters": tool.get("input_schema").cloned().unwrap_or(json!({"type": "object"})),
                    },
                }))
            })
            .collect::<Result<Vec<_>, FormatError>>()?;
        out.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = object.get("tool_choice").filter(|c| !c.is_null()) {
        let choice = match (choice["type"].as_str(), choice["name"].as_str()) {
            (Some("auto"), _) => json!("auto"),
            (Some("any"), _) => json!("required"),
            (Some("none"), _) => json!("none"),
            (Some("tool"), Some(name)) => json!({ "type": "function", "function": { "name": name } }),
            _ => {
                return Err(
                    "`tool_choice` must be {\"type\":\"auto\"|\"any\"|\"none\"} or {\"type\":\"tool\",\"name\":…}"
                        .into(),
                )
            }
        };
        out.insert("tool_choice".into(), choice);
    }
    Ok(Value::Object(out))
}

/// One Anthropic turn as OpenAI messages: tool results become `tool` messages (first, as
/// Anthropic puts them), text the user's or assistant's message, `tool_use` the assistant's
/// tool calls.
fn convert_turn(turn: &Value, out: &mut Vec<Value>) -> Result<(), FormatError> {
    let role = match turn["role"].as_str() {
        Some(role @ ("user" | "assistant")) => role,
        _ => return Err("`role` must be \"user\" or \"assistant\"".into()),
    };
    let blocks = match &turn["content"] {
        Value::String(text) => vec![json!({ "type": "text", "text": text })],
        Value::Array(blocks) => blocks.clone(),
        _ => return Err("`content` must be a string or an array of blocks".into()),
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut images = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("image") if role == "user" => {
                let source = &block["source"];
                let url = match (source["type"].as_str(), source["url"].as_str()) {
                    (Some("base64"), _) => {
                        let (Some(media_type), Some(data)) =
                            (source["media_type"].as_str(), source["data"].as_str())
                        else {
                            return Err(format!(
                                "content[{j}]: a base64 image source needs `media_type` and `data`"
                            )
                            .into());
                        };
                        completions::image_from_base64(media_type, data)
                            .map_err(|e| e.within(format!("content[{j}]")))?
                            .url
                    }
                    (Some("url"), Some(url)) => url.to_string(),
                    _ => {
                        return Err(format!(
                            "content[{j}]: an image block's `source` must be {{\"type\":\"base64\",…}} or {{\"type\":\"url\",\"url\":…}}"
                        )
                        .into())
                    }
                };
                images.push(json!({ "type": "image_url", "image_url": { "url": url } }));
            }
            Some("tool_use") if role == "assistant" => {
                let (Some(id), Some(name)) = (block["id"].as_str(), block["name"].as_str()) else {
                    return Err(format!("content[{j}]: a tool_use block needs `id` and `name`").into());
                };
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": { "name": name, "arguments": block.get("input").cloned().unwrap_or(json!({})).to_string() },
                }));
            }
            Some("tool_result") if role == "user" => {
                let id = block["tool_use_id"]
                    .as_str()
                    .ok_or(format!("content[{j}]: a tool_result block needs `tool_use_id`"))?;
                let content = match &block["content"] {
                    Value::String(text) => text.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(""),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                let content = if block["is_error"] == true {
                    format!("error: {content}")
                } else {
                    content
                };
                out.push(json!({ "role": "tool", "tool_call_id": id, "content": content }));
            }
            Some(kind) => {
                return Err(format!(
                    "content[{j}]: `{kind}` blocks are not supported here (text, tool_use and tool_result are)"
                ).into())
            }
            None => return Err(format!("content[{j}]: a block needs a `type`").into()),
        }
    }
    if !images.is_empty() {
        let mut parts = vec![json!({ "type": "text", "text": text })];
        parts.extend(images);
        out.push(json!({ "role": role, "content": parts }));
    } else if !text.is_empty() || !calls.is_empty() {
        let mut message = json!({ "role": role, "content": text });
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        out.push(message);
    }
    Ok(())
}

fn content_blocks(text: &str, tool_calls: &[ToolCall]) -> Vec<Value> {
    let mut blocks = Vec::new();
    if !text.is_empty() {
        blocks.push(json!({ "type": "text", "text": text }));
    }
    blocks.extend(tool_calls.iter().map(|c| {
        json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": tool_input(&c.arguments) })
    }));
    blocks
}

fn message_json(id: &str, model: &str, answer: &RouterResponse) -> Value {
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(&answer.text, &answer.tool_calls),
        "stop_reason": stop_reason(answer.finish_reason),
        "stop_sequence": null,
        "usage": {
            "input_tokens": answer.usage.prompt_tokens,
            "output_tokens": answer.usage.completion_tokens,
        },
    })
}

fn event(kind: &str, data: Value) -> Event {
    Event::default().event(kind).data(data.to_string())
}

/// Anthropic Messages through the model router (`model` names a route).
#[utoipa::path(post, path = "/v1/messages", request_body(content = Object, description = "An Anthropic Messages request; `model` names a route (GET /v1/models). The key may be sent as `x-api-key`."), responses((status = 200, description = "A `message`, or `text/event-stream` events when `stream` is true"), (status = 400, description = "Anthropic's error envelope"), (status = 401, description = "Anthropic's error envelope"), (status = 403, description = "Anthropic's error envelope"), (status = 404, description = "No such route"), (status = 413, description = "Anthropic's error envelope"), (status = 415, description = "Anthropic's error envelope"), (status = 422, description = "Anthropic's error envelope"), (status = 429, description = "Rate limit or budget; see Retry-After"), (status = 502, description = "Every target failed")))]
pub async fn messages(
    State(state): State<AppState>,
    caller: Result<Caller, ApiError>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    match answer(state, caller, headers, request).await {
        Ok(response) => response,
        Err(error) => refusal(error),
    }
}

async fn answer(
    state: AppState,
    caller: Result<Caller, ApiError>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    // The credential is checked before a byte of the body is read (the body was
    // read first, so an anonymous client could hold the handler with a trickled body).
    let Caller(caller) = caller?;
    caller.require_operator()?;
    let ApiJson(body) = ApiJson::<Value>::from_request(request, &state).await?;
    let parsed = openai_body(&body)
        .and_then(|b| completions::parse_request(&b))
        .map_err(|e| ApiError::new(ErrorCode::MalformedRequest, e.to_string()))?;
    let mut options = options(&caller, &headers, &parsed.request.route)?;
    let id = *options.request_id.get_or_insert_with(Uuid::now_v7);
    let message_id = format!("msg_{}", id.simple());
    let model = parsed.request.route.clone();
    if !parsed.stream {
        return Ok(
            match state.model_router.call(parsed.request, options, None).await {
                Ok(answer) => answer_json(message_json(&message_id, &model, &answer), &answer),
                Err(error) => router_refusal(&error),
            },
        );
    }
    let streamed = match streamed::start(state.model_router.clone(), parsed.request, options).await
    {
        Ok(streamed) => streamed,
        Err(Refused::Router(error)) => return Ok(router_refusal(&error)),
        Err(Refused::Internal(error)) => return Err(error),
    };
    let mut started = false;
    let mut text_open = false;
    let response = streamed::sse(streamed, id, move |step| {
        let mut events = Vec::new();
        if !std::mem::replace(&mut started, true) {
            events.push(event(
                "message_start",
                json!({
                    "type": "message_start",
                    "message": {
                        "id": message_id, "type": "message", "role": "assistant", "model": model,
                        "content": [], "stop_reason": null, "stop_sequence": null,
                        "usage": { "input_tokens": 0, "output_tokens": 0 },
                    },
                }),
            ));
        }
        match step {
            Step::Text(text) => {
                if !std::mem::replace(&mut text_open, true) {
                    events.push(event(
                        "content_block_start",
                        json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
                    ));
                }
                events.push(event(
                    "content_block_delta",
                    json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": text } }),
                ));
            }
            Step::Done(result) => match *result {
                Ok(answer) => {
                    let mut index = 0;
                    if text_open {
                        events.push(event(
                            "content_block_stop",
                            json!({ "type": "content_block_stop", "index": 0 }),
                        ));
                        index = 1;
                    }
                    for call in &answer.tool_calls {
                        events.push(event(
                            "content_block_start",
                            json!({ "type": "content_block_start", "index": index, "content_block": { "type": "tool_use", "id": call.id, "name": call.name, "input": {} } }),
                        ));
                        events.push(event(
                            "content_block_delta",
                            json!({ "type": "content_block_delta", "index": index, "delta": { "type": "input_json_delta", "partial_json": tool_input(&call.arguments).to_string() } }),
                        ));
                        events.push(event(
                            "content_block_stop",
                            json!({ "type": "content_block_stop", "index": index }),
                        ));
                        index += 1;
                    }
                    events.push(event(
                        "message_delta",
                        json!({
                            "type": "message_delta",
                            "delta": { "stop_reason": stop_reason(answer.finish_reason), "stop_sequence": null },
                            "usage": { "input_tokens": answer.usage.prompt_tokens, "output_tokens": answer.usage.completion_tokens },
                            "stead": { "request_id": answer.id, "provider": answer.provider, "model": answer.model, "cache": answer.cache.as_str(), "attempts": answer.attempts.len() },
                        }),
                    ));
                    events.push(event("message_stop", json!({ "type": "message_stop" })));
                }
                Err(error) => {
                    let code: ErrorCode = error.code.into();
                    events.push(event(
                        "error",
                        envelope(code.status(), code.as_str(), &error.message),
                    ));
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
    fn a_messages_request_becomes_a_chat_request() {
        let body = json!({
            "model": "default",
            "max_tokens": 64,
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "Time?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "t1", "name": "clock", "input": {"tz": "UTC"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "12:00"}]},
                    {"type": "text", "text": "Thanks"}
                ]}
            ],
            "tools": [{"name": "clock", "description": "the time", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "clock"},
            "stop_sequences": ["END"],
            "metadata": {"user_id": "u1"}
        });
        assert_eq!(
            openai_body(&body).unwrap(),
            json!({
                "model": "default",
                "max_tokens": 64,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Time?"},
                    {"role": "assistant", "content": "Checking.", "tool_calls": [
                        {"id": "t1", "type": "function", "function": {"name": "clock", "arguments": "{\"tz\":\"UTC\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "t1", "content": "12:00"},
                    {"role": "user", "content": "Thanks"}
                ],
                "tools": [{"type": "function", "function": {"name": "clock", "description": "the time", "parameters": {"type": "object"}}}],
                "tool_choice": {"type": "function", "function": {"name": "clock"}},
                "stop": ["END"]
            })
        );
        assert!(completions::parse_request(&openai_body(&body).unwrap()).is_ok());
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        let cases = [
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
                "max_tokens",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": []}),
                "messages",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}),
                "role",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
                "image",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "maybe"}}),
                "tool_choice",
            ),
        ];
        for (body, needle) in cases {
            let error = openai_body(&body).unwrap_err();
            assert!(error.message().contains(needle), "{error}");
        }
        assert_eq!(error_type(StatusCode::UNAUTHORIZED), "authentication_error");
        assert_eq!(
            error_type(StatusCode::UNPROCESSABLE_ENTITY),
            "invalid_request_error"
        );
        assert_eq!(
            error_type(StatusCode::TOO_MANY_REQUESTS),
            "rate_limit_error"
        );
        assert_eq!(error_type(StatusCode::BAD_GATEWAY), "api_error");
    }
}

//! Requests callers send to the router: a `/v1/chat/completions` body read into a
//! [`RouterRequest`], naming the offending field when it is malformed.

use serde_json::{json, Map, Value};

use super::FormatError;
use crate::chat::{ChatMessage, Image, Role, ToolCall, ToolChoice, ToolSpec};
use crate::provider::{Params, RouterRequest};

/// The fields a request may carry that the router reads itself (everything else is passed on).
pub(crate) const KNOWN_FIELDS: [&str; 13] = [
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
pub fn parse_request(body: &Value) -> Result<ParsedRequest, FormatError> {
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
        .map(|(i, m)| parse_message(m).map_err(|e| e.within(format!("messages[{i}]"))))
        .collect::<Result<Vec<_>, _>>()?;
    let tools = match object.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(tools)) => tools
            .iter()
            .enumerate()
            .map(|(i, t)| parse_tool(t).map_err(|e| e.within(format!("tools[{i}]"))))
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
                ).into())
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
            return Err(format!("`tool_choice` names `{name}`, which is not among `tools`").into());
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
    let number = |key: &str, low: f64, high: f64| -> Result<Option<f32>, FormatError> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if (low..=high).contains(&x) => Ok(Some(x as f32)),
                _ => Err(format!("`{key}` must be a number from {low} to {high}").into()),
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

pub(crate) fn parse_message(message: &Value) -> Result<ChatMessage, FormatError> {
    let role = match message["role"].as_str() {
        Some("system") | Some("developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        _ => return Err("`role` must be system, developer, user, assistant or tool".into()),
    };
    let mut images = Vec::new();
    let content = match &message["content"] {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text"), Some(piece)) => text.push_str(piece),
                    (Some("image_url"), _) if role == Role::User => {
                        let (url, detail) = match &part["image_url"] {
                            Value::String(url) => (Some(url.as_str()), None),
                            object => (object["url"].as_str(), object["detail"].as_str()),
                        };
                        let url = url.ok_or("an `image_url` part needs `image_url.url`")?;
                        images.push(Image {
                            detail: detail.map(str::to_string),
                            ..parse_image_url(url)?
                        });
                    }
                    (Some("image_url"), _) => {
                        return Err("only user messages may carry images".into())
                    }
                    _ => return Err("content parts must be `text` or `image_url`".into()),
                }
            }
            text
        }
        _ => return Err("`content` must be a string, an array of parts or null".into()),
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
            .collect::<Result<Vec<_>, FormatError>>()?,
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
        images,
    })
}

pub use crate::chat::IMAGE_TYPES;

/// An image a caller sent by URL: a base64 `data:` URL of one of [`IMAGE_TYPES`], or an
/// `https:` URL (passed on for the provider to fetch; Stead fetches nothing).
pub fn parse_image_url(url: &str) -> Result<Image, FormatError> {
    if url.starts_with("https://") {
        return Ok(Image {
            url: url.to_string(),
            detail: None,
        });
    }
    let candidate = Image {
        url: url.to_string(),
        detail: None,
    };
    let Some((media_type, data)) = candidate.data() else {
        return Err("an image must be a base64 `data:` URL or an `https:` URL".into());
    };
    image_from_base64(media_type, data)
}

/// An image from its media type and base64 bytes, both checked.
pub fn image_from_base64(media_type: &str, data: &str) -> Result<Image, FormatError> {
    if !IMAGE_TYPES.contains(&media_type) {
        return Err(format!(
            "an image's type must be one of {} (not `{media_type}`)",
            IMAGE_TYPES.join(", ")
        )
        .into());
    }
    let base64 = data
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    if data.is_empty() || !base64 {
        return Err("an image's data must be non-empty base64".into());
    }
    Ok(Image::base64(media_type, data))
}

pub(crate) fn parse_tool(tool: &Value) -> Result<ToolSpec, FormatError> {
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

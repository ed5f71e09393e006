//! The `anthropic` provider: Anthropic's native Messages API (`POST {base_url}/v1/messages`,
//! `x-api-key`, `anthropic-version`), whole or streamed over server-sent events, tools
//! included, so that a route can fall back from one vendor to another. The chat vocabulary
//! maps onto Messages like this: system messages become `system`; a tool result becomes a
//! `tool_result` block of a user turn; an assistant's tool calls become `tool_use` blocks;
//! consecutive turns of one role are merged (the API wants them alternating); `tool_choice`
//! `required` is `any`; `max_tokens`, which the API requires, defaults to 4096.

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{json, Map, Value};

use super::openai::{status_error, transport_error};
use crate::answer::{read_limited, AnswerLimit, MAX_ANSWER_BYTES};
use crate::chat::{ChatMessage, FinishReason, Image, Role, ToolCall, ToolChoice, Usage};
use crate::completions::FormatError;
use crate::provider::{Chunk, FailureKind, Provider, ProviderCall, ProviderError, ProviderReply};

/// The API version sent as `anthropic-version`.
pub const API_VERSION: &str = "2023-06-01";
/// `max_tokens` when neither the caller nor the target sets one (the API requires it).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A provider behind Anthropic's Messages API.
pub struct AnthropicProvider {
    name: String,
    /// `{base_url}/v1/messages`.
    url: reqwest::Url,
    api_key: Option<String>,
    client: reqwest::Client,
    /// The most bytes of one answer ([`crate::answer::MAX_ANSWER_BYTES`] unless set).
    answer_limit: usize,
}

impl AnthropicProvider {
    /// `base_url` is the API's root, e.g. `https://api.anthropic.com`; `/v1/messages` is
    /// appended. `api_key` is sent as `x-api-key`.
    ///
    /// # Panics
    /// When `base_url` is not a URL (configuration validates it first).
    pub fn new(
        name: impl Into<String>,
        base_url: &str,
        api_key: Option<String>,
        client: reqwest::Client,
    ) -> Self {
        let base = base_url.trim_end_matches('/');
        // Documented under `# Panics`: the configuration checks `base_url` before this runs.
        #[allow(clippy::expect_used)]
        let url =
            reqwest::Url::parse(&format!("{base}/v1/messages")).expect("a validated base_url");
        AnthropicProvider {
            name: name.into(),
            url,
            api_key,
            client,
            answer_limit: MAX_ANSWER_BYTES,
        }
    }

    /// The same provider with another bound on one answer's bytes (`max_answer_mib`).
    pub fn with_answer_limit(mut self, bytes: usize) -> Self {
        self.answer_limit = bytes;
        self
    }

    fn stream_error(&self, message: impl std::fmt::Display) -> ProviderError {
        ProviderError::new(FailureKind::Stream, format!("{}: {message}", self.name)).quoting()
    }
}

/// Anthropic's `stop_reason` for a finish reason.
pub fn stop_reason(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop | FinishReason::Cancelled => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
    }
}

fn finish_reason(stop_reason: Option<&str>) -> FinishReason {
    match stop_reason {
        Some("max_tokens") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    }
}

/// A tool call's arguments (JSON text) as a `tool_use` block's `input` object.
pub fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(value @ Value::Object(_)) => value,
        _ => json!({}),
    }
}

/// The request body for one attempt.
pub fn provider_body(
    model: &str,
    request: &crate::provider::RouterRequest,
    max_tokens: Option<u32>,
    continue_from: &str,
    stream: bool,
) -> Value {
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.content.as_str())
        .collect();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, blocks: Vec<Value>| {
        if blocks.is_empty() {
            return;
        }
        match turns.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    };
    for message in &request.messages {
        match message.role {
            Role::System => {}
            Role::User => {
                let mut blocks = text_block(&message.content);
                blocks.extend(message.images.iter().map(image_block));
                push("user", blocks)
            }
            Role::Tool => push(
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id.clone().unwrap_or_default(),
                    "content": message.content,
                })],
            ),
            Role::Assistant => push("assistant", assistant_blocks(message)),
        }
    }
    if !continue_from.is_empty() {
        // Prefill: the model continues the text earlier targets streamed.
        push("assistant", text_block(continue_from));
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "max_tokens".into(),
        json!(max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    body.insert(
        "messages".into(),
        Value::Array(
            turns
                .into_iter()
                .map(|(role, content)| json!({ "role": role, "content": content }))
                .collect(),
        ),
    );
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters }))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Auto => json!({ "type": "auto" }),
            ToolChoice::None => json!({ "type": "none" }),
            ToolChoice::Required => json!({ "type": "any" }),
            ToolChoice::Function(name) => json!({ "type": "tool", "name": name }),
        };
        body.insert("tool_choice".into(), choice);
    }
    let params = &request.params;
    if let Some(t) = params.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = params.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if !params.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(params.stop));
    }
    if stream {
        body.insert("stream".into(), json!(true));
    }
    Value::Object(body)
}

fn text_block(text: &str) -> Vec<Value> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![json!({ "type": "text", "text": text })]
    }
}

/// An image as a Messages `image` block: a `data:` URL's bytes as a `base64` source, any
/// other URL as a `url` source.
pub fn image_block(image: &Image) -> Value {
    match image.data() {
        Some((media_type, data)) => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }),
        None => json!({"type": "image", "source": {"type": "url", "url": image.url}}),
    }
}

fn assistant_blocks(message: &ChatMessage) -> Vec<Value> {
    let mut blocks = text_block(&message.content);
    blocks.extend(message.tool_calls.iter().map(|call| {
        json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(&call.arguments) })
    }));
    blocks
}

/// A whole `message` answer: its text, tool calls, stop reason, usage and model.
fn parse_message(value: &Value, asked: &str) -> Result<ProviderReply, FormatError> {
    let content = value["content"]
        .as_array()
        .ok_or("the answer has no `content` array")?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block["id"].as_str().unwrap_or_default().to_string(),
                name: block["name"].as_str().unwrap_or_default().to_string(),
                arguments: block["input"].to_string(),
            }),
            _ => {}
        }
    }
    Ok(ProviderReply {
        text,
        tool_calls,
        finish_reason: finish_reason(value["stop_reason"].as_str()),
        usage: Usage {
            prompt_tokens: value["usage"]["input_tokens"].as_u64().unwrap_or(0) as usize,
            completion_tokens: value["usage"]["output_tokens"].as_u64().unwrap_or(0) as usize,
        },
        model: value["model"].as_str().unwrap_or(asked).to_string(),
    })
}

/// Folds a Messages event stream (`data:` lines of JSON events) into a reply, sending text as
/// it arrives.
#[derive(Default)]
struct StreamAssembler {
    buffer: Vec<u8>,
    text: String,
    /// Tool-use blocks by index: id, name, input JSON so far.
    tools: Vec<(usize, String, String, String)>,
    stop_reason: Option<String>,
    usage: Usage,
    model: Option<String>,
    done: bool,
}

impl StreamAssembler {
    /// Reads what `bytes` completes; returns the events' text and how many tool fragments came.
    fn feed(&mut self, bytes: &[u8]) -> Result<(Vec<String>, usize), FormatError> {
        self.buffer.extend_from_slice(bytes);
        let mut texts = Vec::new();
        let mut fragments = 0;
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim_end().strip_prefix("data:") else {
                continue;
            };
            let event: Value = serde_json::from_str(data.trim())
                .map_err(|e| format!("an unreadable stream event: {e}"))?;
            match event["type"].as_str() {
                Some("message_start") => {
                    let message = &event["message"];
                    self.model = message["model"].as_str().map(String::from);
                    self.usage.prompt_tokens =
                        message["usage"]["input_tokens"].as_u64().unwrap_or(0) as usize;
                }
                Some("content_block_start") => {
                    let block = &event["content_block"];
                    let index = event["index"].as_u64().unwrap_or(0) as usize;
                    if block["type"] == "tool_use" {
                        self.tools.push((
                            index,
                            block["id"].as_str().unwrap_or_default().to_string(),
                            block["name"].as_str().unwrap_or_default().to_string(),
                            String::new(),
                        ));
                        fragments += 1;
                    } else if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                        self.text.push_str(text);
                        texts.push(text.to_string());
                    }
                }
                Some("content_block_delta") => {
                    let delta = &event["delta"];
                    let index = event["index"].as_u64().unwrap_or(0) as usize;
                    match delta["type"].as_str() {
                        Some("text_delta") => {
                            let text = delta["text"].as_str().unwrap_or_default();
                            self.text.push_str(text);
                            texts.push(text.to_string());
                        }
                        Some("input_json_delta") => {
                            if let Some(tool) = self.tools.iter_mut().find(|t| t.0 == index) {
                                tool.3
                                    .push_str(delta["partial_json"].as_str().unwrap_or_default());
                            }
                            fragments += 1;
                        }
                        _ => {}
                    }
                }
                Some("message_delta") => {
                    if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                        self.stop_reason = Some(reason.to_string());
                    }
                    if let Some(n) = event["usage"]["output_tokens"].as_u64() {
                        self.usage.completion_tokens = n as usize;
                    }
                    if let Some(n) = event["usage"]["input_tokens"].as_u64() {
                        self.usage.prompt_tokens = n as usize;
                    }
                }
                Some("message_stop") => self.done = true,
                Some("error") => {
                    return Err(format!(
                        "the stream ended with an error: {}",
                        event["error"]["message"].as_str().unwrap_or("unknown")
                    )
                    .into())
                }
                _ => {}
            }
        }
        Ok((texts, fragments))
    }

    fn finish(self, asked: &str) -> Result<ProviderReply, FormatError> {
        if !self.done {
            return Err("the stream ended before `message_stop`".into());
        }
        let tool_calls = self
            .tools
            .into_iter()
            .map(|(_, id, name, input)| ToolCall {
                id,
                name,
                arguments: if input.trim().is_empty() {
                    "{}".into()
                } else {
                    tool_input(&input).to_string()
                },
            })
            .collect();
        Ok(ProviderReply {
            text: self.text,
            tool_calls,
            finish_reason: finish_reason(self.stop_reason.as_deref()),
            usage: self.usage,
            model: self.model.unwrap_or_else(|| asked.to_string()),
        })
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn system(&self) -> &str {
        "anthropic"
    }

    async fn chat(&self, call: ProviderCall<'_>) -> Result<ProviderReply, ProviderError> {
        let streaming = call.chunks.is_some();
        let body = provider_body(
            call.model,
            call.request,
            call.max_tokens,
            call.continue_from,
            streaming,
        );
        let mut request = self
            .client
            .post(self.url.clone())
            .header("anthropic-version", API_VERSION)
            .json(&body);
        if let Some(key) = &self.api_key {
            request = request.header("x-api-key", key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| transport_error(&self.name, &e, false))?;
        if !response.status().is_success() {
            return Err(status_error(&self.name, response).await);
        }
        match call.chunks {
            None => {
                let bytes = read_limited(&self.name, response, self.answer_limit).await?;
                let value: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| self.stream_error(format!("an unreadable answer: {e}")))?;
                parse_message(&value, call.model).map_err(|e| self.stream_error(e))
            }
            Some(chunks) => {
                let mut body = std::pin::pin!(response.bytes_stream());
                let mut assembler = StreamAssembler::default();
                let mut received = AnswerLimit::new(&self.name, self.answer_limit);
                while let Some(bytes) = body.next().await {
                    let bytes = bytes.map_err(|e| transport_error(&self.name, &e, true))?;
                    received.take(bytes.len())?;
                    let (texts, fragments) =
                        assembler.feed(&bytes).map_err(|e| self.stream_error(e))?;
                    for text in texts {
                        let _ = chunks.send(Chunk::Text(text));
                    }
                    for _ in 0..fragments {
                        let _ = chunks.send(Chunk::ToolCallFragment);
                    }
                    if assembler.done {
                        break;
                    }
                }
                assembler
                    .finish(call.model)
                    .map_err(|e| self.stream_error(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ToolSpec;
    use crate::provider::RouterRequest;

    #[test]
    fn a_conversation_with_tools_becomes_alternating_turns() {
        let request = RouterRequest {
            route: "r".into(),
            messages: vec![
                ChatMessage::system("Be brief."),
                ChatMessage::user("Time?"),
                ChatMessage {
                    role: Role::Assistant,
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "t1".into(),
                        name: "clock".into(),
                        arguments: r#"{"tz":"UTC"}"#.into(),
                    }],
                    tool_call_id: None,
                    images: Vec::new(),
                },
                ChatMessage {
                    role: Role::Tool,
                    content: "12:00".into(),
                    tool_calls: vec![],
                    tool_call_id: Some("t1".into()),
                    images: Vec::new(),
                },
                ChatMessage::user("Thanks"),
            ],
            tools: vec![ToolSpec {
                name: "clock".into(),
                description: "the time".into(),
                parameters: json!({"type": "object"}),
            }],
            tool_choice: ToolChoice::Required,
            ..Default::default()
        };
        let body = provider_body("claude", &request, None, "", true);
        assert_eq!(
            body,
            json!({
                "model": "claude",
                "max_tokens": DEFAULT_MAX_TOKENS,
                "system": "Be brief.",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Time?"}]},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "clock", "input": {"tz": "UTC"}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "12:00"},
                        {"type": "text", "text": "Thanks"}
                    ]}
                ],
                "tools": [{"name": "clock", "description": "the time", "input_schema": {"type": "object"}}],
                "tool_choice": {"type": "any"},
                "stream": true
            })
        );
    }

    #[test]
    fn images_become_image_blocks_after_the_text() {
        let request = RouterRequest {
            messages: vec![ChatMessage {
                images: vec![
                    Image::base64("image/jpeg", "/9j/4AAQ"),
                    Image {
                        url: "https://example.com/cat.png".into(),
                        detail: Some("high".into()),
                    },
                ],
                ..ChatMessage::user("What is this?")
            }],
            ..Default::default()
        };
        let body = provider_body("claude", &request, None, "", false);
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
            ]}])
        );
    }

    #[test]
    fn a_stream_assembles_into_text_and_tool_calls() {
        let events = [
            json!({"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 12, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "check."}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "clock", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"tz\":"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"UTC\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ];
        let text: String = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect();
        let mut assembler = StreamAssembler::default();
        let mut streamed = Vec::new();
        // Fed in awkward pieces, as a network delivers it.
        for piece in text.as_bytes().chunks(7) {
            streamed.extend(assembler.feed(piece).unwrap().0);
        }
        assert_eq!(streamed.concat(), "Let me check.");
        let reply = assembler.finish("asked").unwrap();
        assert_eq!(reply.text, "Let me check.");
        assert_eq!(reply.finish_reason, FinishReason::ToolCalls);
        assert_eq!(
            reply.tool_calls,
            vec![ToolCall {
                id: "toolu_1".into(),
                name: "clock".into(),
                arguments: r#"{"tz":"UTC"}"#.into()
            }]
        );
        assert_eq!(
            reply.usage,
            Usage {
                prompt_tokens: 12,
                completion_tokens: 9
            }
        );
        assert_eq!(reply.model, "claude-x");
    }

    #[test]
    fn a_broken_stream_is_an_error() {
        let mut assembler = StreamAssembler::default();
        assembler
            .feed(b"data: {\"type\":\"message_start\",\"message\":{}}\n")
            .unwrap();
        assert!(assembler.finish("m").is_err());
        let mut assembler = StreamAssembler::default();
        let error = assembler
            .feed(b"data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n")
            .unwrap_err();
        assert!(error.message().contains("Overloaded"), "{error}");
    }
}

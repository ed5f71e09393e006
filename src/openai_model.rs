//! Connects the session actors' `ModelClient` to any OpenAI-compatible HTTP API (OpenAI itself,
//! vLLM, llama.cpp's server, Ollama, hosted gateways): one chat completions call per model call,
//! streamed over server-sent events. The stream is folded by a pure [`StreamAccumulator`], so
//! the wire format is tested without a server; the client around it only moves bytes, forwards
//! text deltas and watches the cancel flag.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{json, Value};
use stead_actors::session::{ModelClient, ModelRequest};
use stead_actors::{ModelOutput, TranscriptEntry, Usage};
use tokio::sync::mpsc::UnboundedSender;

/// How often a call waiting on the network looks at its cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// How much of an error body goes into the error message.
const ERROR_EXCERPT_CHARS: usize = 200;

/// A model behind an OpenAI-compatible chat completions API.
pub struct OpenAiModel {
    /// The provider's name, reported as [`ModelOutput::provider`] and used in errors.
    pub provider: String,
    /// The API root that `/chat/completions` is appended to, e.g. `http://127.0.0.1:9000/v1`
    /// (without a trailing slash).
    pub base_url: String,
    /// The model asked for; the answer's own `model` is reported when the server names one.
    pub model: String,
    /// Sent as `Authorization: Bearer` when set.
    pub api_key: Option<String>,
    /// `max_tokens` of every call; the server's default when unset.
    pub max_tokens: Option<u32>,
    /// The deadline of a whole call, from connecting until the last streamed byte.
    pub timeout: Duration,
    /// Shared between models so calls reuse connections.
    pub client: reqwest::Client,
}

/// The chat completions request body for one model call of a session.
///
/// The transcript maps onto OpenAI's messages: the system prompt first (when not empty), the
/// assistant's tool calls with their arguments as JSON strings (and `content: null` when the
/// assistant said nothing besides them, which strict servers require), and each tool result as
/// a `tool` message whose content is the result's JSON text, or the string itself when the
/// result is a JSON string. `tools` is left out when the agent has none, and a streamed call
/// asks for the usage chunk at the end (`stream_options.include_usage`).
pub fn chat_body(
    model: &str,
    request: &ModelRequest,
    max_tokens: Option<u32>,
    stream: bool,
) -> Value {
    let mut messages = Vec::with_capacity(request.transcript.len() + 1);
    if !request.system_prompt.is_empty() {
        messages.push(json!({ "role": "system", "content": request.system_prompt }));
    }
    for entry in &request.transcript {
        messages.push(match entry {
            TranscriptEntry::User { text } => json!({ "role": "user", "content": text }),
            TranscriptEntry::Assistant { text, tool_calls } if tool_calls.is_empty() => {
                json!({ "role": "assistant", "content": text })
            }
            TranscriptEntry::Assistant { text, tool_calls } => json!({
                "role": "assistant",
                "content": if text.is_empty() { Value::Null } else { Value::from(text.as_str()) },
                "tool_calls": tool_calls
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.call_id,
                            "type": "function",
                            "function": { "name": c.tool, "arguments": c.arguments.to_string() },
                        })
                    })
                    .collect::<Vec<_>>(),
            }),
            TranscriptEntry::Tool {
                call_id, content, ..
            } => json!({
                "role": "tool",
                "tool_call_id": call_id,
                "content": match content {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                },
            }),
        });
    }
    let mut body = json!({ "model": model, "messages": messages, "stream": stream });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                })
            })
            .collect();
    }
    if let Some(max_tokens) = max_tokens {
        body["max_tokens"] = Value::from(max_tokens);
    }
    if stream {
        body["stream_options"] = json!({ "include_usage": true });
    }
    body
}

/// What a finished stream said.
#[derive(Debug, Clone, PartialEq)]
pub struct Streamed {
    pub text: String,
    /// `(tool, arguments)` in the order of their stream indexes.
    pub tool_calls: Vec<(String, Value)>,
    /// The server's usage; when it sent none, the prompt is counted as 0 tokens and the
    /// completion as one token per streamed fragment (content delta or tool-call delta).
    pub usage: Usage,
    /// The model the server says answered.
    pub model: Option<String>,
}

/// One tool call as its fragments arrive.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
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
    /// Content and tool-call deltas seen: the completion size when the server reports none.
    fragments: u64,
    tool_calls: BTreeMap<u64, PartialCall>,
    usage: Option<Usage>,
    model: Option<String>,
    finish_reason: Option<String>,
    done: bool,
}

impl StreamAccumulator {
    /// Folds the next bytes of the body and returns the text deltas they completed, in order.
    /// An error (an unreadable chunk, or an error the server reported in the stream) ends the
    /// stream.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<String>, String> {
        let mut pieces = Vec::new();
        if self.done {
            return Ok(pieces);
        }
        let mut buffer = std::mem::take(&mut self.pending);
        buffer.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(newline) = buffer[start..].iter().position(|&b| b == b'\n') {
            let end = start + newline;
            let line = buffer[start..end]
                .strip_suffix(b"\r")
                .unwrap_or(&buffer[start..end]);
            self.line(line, &mut pieces)?;
            start = end + 1;
            if self.done {
                return Ok(pieces);
            }
        }
        buffer.drain(..start);
        self.pending = buffer;
        Ok(pieces)
    }

    /// The body ended: folds a last line or event that lacked its line break or blank line.
    pub fn end(&mut self) -> Result<Vec<String>, String> {
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

    /// The whole answer. Fails when the stream stopped before the answer was finished (neither
    /// `[DONE]` nor a `finish_reason` arrived), or a tool call has no name or arguments that
    /// are not JSON (empty arguments are `{}`).
    pub fn finish(mut self) -> Result<Streamed, String> {
        self.end()?;
        if !self.done && self.finish_reason.is_none() {
            return Err("the stream ended before the answer was complete".into());
        }
        let cut = if self.finish_reason.as_deref() == Some("length") {
            " (the answer was cut off at max_tokens)"
        } else {
            ""
        };
        let mut tool_calls = Vec::with_capacity(self.tool_calls.len());
        for (index, call) in self.tool_calls {
            if call.name.is_empty() {
                return Err(format!("tool call {index} (id `{}`) has no name", call.id));
            }
            let arguments = if call.arguments.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(&call.arguments).map_err(|e| {
                    format!(
                        "the arguments of tool `{}` are not valid JSON{cut}: {e}",
                        call.name
                    )
                })?
            };
            tool_calls.push((call.name, arguments));
        }
        Ok(Streamed {
            text: self.text,
            tool_calls,
            usage: self.usage.unwrap_or(Usage {
                prompt_tokens: 0,
                completion_tokens: self.fragments,
            }),
            model: self.model,
        })
    }

    /// One line, without its line break.
    fn line(&mut self, line: &[u8], pieces: &mut Vec<String>) -> Result<(), String> {
        if line.is_empty() {
            return self.dispatch(pieces);
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
    fn dispatch(&mut self, pieces: &mut Vec<String>) -> Result<(), String> {
        let Some(data) = self.data.take() else {
            return Ok(());
        };
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(&data)
            .map_err(|e| format!("unreadable stream chunk ({e}): {}", excerpt(&data)))?;
        self.chunk(&chunk, pieces)
    }

    fn chunk(&mut self, chunk: &Value, pieces: &mut Vec<String>) -> Result<(), String> {
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
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(Usage {
                prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
                completion_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
            });
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
                pieces.push(content.to_string());
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
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ModelClient for OpenAiModel {
    async fn complete(
        &self,
        request: ModelRequest,
        deltas: UnboundedSender<String>,
        cancel: Arc<AtomicBool>,
    ) -> Result<ModelOutput, String> {
        let started = Instant::now();
        let url = format!("{}/chat/completions", self.base_url);
        let mut call = self
            .client
            .post(&url)
            .timeout(self.timeout)
            .json(&chat_body(&self.model, &request, self.max_tokens, true));
        if let Some(key) = &self.api_key {
            call = call.bearer_auth(key);
        }
        let response = tokio::select! {
            biased;
            _ = cancelled(&cancel) => return Err("cancelled".into()),
            response = call.send() => response.map_err(|e| self.transport_error(&e))?,
        };
        let status = response.status();
        if !status.is_success() {
            let body = tokio::select! {
                biased;
                _ = cancelled(&cancel) => return Err("cancelled".into()),
                body = response.text() => body.unwrap_or_default(),
            };
            return Err(format!(
                "{} answered {status}: {}",
                self.provider,
                excerpt(&body)
            ));
        }

        let mut body = std::pin::pin!(response.bytes_stream());
        let mut stream = StreamAccumulator::default();
        let mut ttft = None;
        loop {
            let next = tokio::select! {
                biased;
                _ = cancelled(&cancel) => return Err("cancelled".into()),
                next = body.next() => next,
            };
            let (fed, ended) = match next {
                Some(Ok(bytes)) => (stream.feed(&bytes), false),
                Some(Err(error)) => return Err(self.transport_error(&error)),
                None => (stream.end(), true),
            };
            let pieces = fed.map_err(|e| format!("{}: {e}", self.provider))?;
            if ttft.is_none() && stream.has_output() {
                ttft = Some(started.elapsed());
            }
            for piece in pieces {
                let _ = deltas.send(piece);
            }
            if ended || stream.is_done() {
                break;
            }
        }
        let answer = stream
            .finish()
            .map_err(|e| format!("{}: {e}", self.provider))?;
        let latency = started.elapsed();
        Ok(ModelOutput {
            text: answer.text,
            tool_calls: answer.tool_calls,
            usage: answer.usage,
            provider: self.provider.clone(),
            model: answer.model.unwrap_or_else(|| self.model.clone()),
            latency_ms: millis(latency),
            ttft_ms: millis(ttft.unwrap_or(latency)),
            // Priced by a price table later.
            cost: 0.0,
        })
    }
}

impl OpenAiModel {
    /// A failed request or broken stream, with the causes reqwest keeps behind its message.
    fn transport_error(&self, error: &reqwest::Error) -> String {
        let mut causes = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            causes.push_str(": ");
            causes.push_str(&cause.to_string());
            source = cause.source();
        }
        if error.is_timeout() {
            format!(
                "{} did not answer within {:?}: {causes}",
                self.provider, self.timeout
            )
        } else if error.is_connect() {
            format!("could not connect to {}: {causes}", self.provider)
        } else {
            format!("the call to {} failed: {causes}", self.provider)
        }
    }
}

/// Resolves once `flag` is set, looking every [`CANCEL_POLL`] (and at once when first polled).
async fn cancelled(flag: &AtomicBool) {
    while !flag.load(Ordering::Relaxed) {
        tokio::time::sleep(CANCEL_POLL).await;
    }
}

fn excerpt(text: &str) -> String {
    text.trim().chars().take(ERROR_EXCERPT_CHARS).collect()
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use stead_actors::session::ToolSpec;
    use stead_actors::RequestedCall;

    use super::*;

    fn weather_tool() -> ToolSpec {
        ToolSpec {
            name: "get_weather".into(),
            description: "Current weather of a city.".into(),
            parameters: json!({
                "type": "object",
                "properties": { "city": { "type": "string" } },
                "required": ["city"],
            }),
        }
    }

    fn call(call_id: &str, city: &str) -> RequestedCall {
        RequestedCall {
            call_id: call_id.into(),
            tool: "get_weather".into(),
            arguments: json!({ "city": city }),
        }
    }

    #[test]
    fn a_transcript_with_tool_calls_maps_onto_openai_messages() {
        let request = ModelRequest {
            route: "default".into(),
            system_prompt: "Be brief.".into(),
            transcript: vec![
                TranscriptEntry::User {
                    text: "Weather in Paris and Rome?".into(),
                },
                TranscriptEntry::Assistant {
                    text: String::new(),
                    tool_calls: vec![call("call_1", "Paris"), call("call_2", "Rome")],
                },
                TranscriptEntry::Tool {
                    call_id: "call_1".into(),
                    tool: "get_weather".into(),
                    content: json!({ "temp": 21 }),
                },
                TranscriptEntry::Tool {
                    call_id: "call_2".into(),
                    tool: "get_weather".into(),
                    content: json!("sunny"),
                },
                TranscriptEntry::Assistant {
                    text: "Paris is 21°C, Rome is sunny.".into(),
                    tool_calls: Vec::new(),
                },
                TranscriptEntry::Assistant {
                    text: "Checking again.".into(),
                    tool_calls: vec![call("call_3", "Oslo")],
                },
            ],
            tools: vec![weather_tool()],
        };
        assert_eq!(
            chat_body("gpt-test", &request, Some(256), true),
            json!({
                "model": "gpt-test",
                "messages": [
                    { "role": "system", "content": "Be brief." },
                    { "role": "user", "content": "Weather in Paris and Rome?" },
                    {
                        "role": "assistant",
                        "content": null,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {
                                    "name": "get_weather",
                                    "arguments": "{\"city\":\"Paris\"}",
                                },
                            },
                            {
                                "id": "call_2",
                                "type": "function",
                                "function": {
                                    "name": "get_weather",
                                    "arguments": "{\"city\":\"Rome\"}",
                                },
                            },
                        ],
                    },
                    { "role": "tool", "tool_call_id": "call_1", "content": "{\"temp\":21}" },
                    { "role": "tool", "tool_call_id": "call_2", "content": "sunny" },
                    { "role": "assistant", "content": "Paris is 21°C, Rome is sunny." },
                    {
                        "role": "assistant",
                        "content": "Checking again.",
                        "tool_calls": [
                            {
                                "id": "call_3",
                                "type": "function",
                                "function": {
                                    "name": "get_weather",
                                    "arguments": "{\"city\":\"Oslo\"}",
                                },
                            },
                        ],
                    },
                ],
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "description": "Current weather of a city.",
                            "parameters": {
                                "type": "object",
                                "properties": { "city": { "type": "string" } },
                                "required": ["city"],
                            },
                        },
                    },
                ],
                "max_tokens": 256,
                "stream": true,
                "stream_options": { "include_usage": true },
            })
        );
    }

    #[test]
    fn a_plain_call_leaves_out_what_it_does_not_use() {
        let request = ModelRequest {
            route: "default".into(),
            system_prompt: String::new(),
            transcript: vec![TranscriptEntry::User { text: "hi".into() }],
            tools: Vec::new(),
        };
        assert_eq!(
            chat_body("m", &request, None, false),
            json!({
                "model": "m",
                "messages": [{ "role": "user", "content": "hi" }],
                "stream": false,
            })
        );
    }

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
    fn feed_bytewise(body: &str) -> (Vec<String>, Result<Streamed, String>) {
        let mut stream = StreamAccumulator::default();
        let mut pieces = Vec::new();
        for byte in body.as_bytes() {
            pieces.extend(stream.feed(std::slice::from_ref(byte)).unwrap());
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
        assert_eq!(stream.feed(first).unwrap(), Vec::<String>::new());
        assert!(!stream.has_output());
        assert_eq!(stream.feed(second).unwrap(), vec!["Hello", " wörld"]);
        assert!(stream.is_done());
        assert_eq!(
            stream.finish().unwrap(),
            Streamed {
                text: "Hello wörld".into(),
                tool_calls: Vec::new(),
                usage: Usage {
                    prompt_tokens: 12,
                    completion_tokens: 2,
                },
                model: Some("gpt-test-0613".into()),
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
            Streamed {
                text: String::new(),
                tool_calls: vec![("get_weather".into(), json!({ "city": "Paris" }))],
                // No usage chunk: one token per fragment.
                usage: Usage {
                    prompt_tokens: 0,
                    completion_tokens: 4,
                },
                model: Some("gpt-test-0613".into()),
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
        assert_eq!(stream.feed(body.as_bytes()).unwrap(), vec!["Let me look."]);
        // No [DONE], but the answer was finished.
        let answer = stream.finish().unwrap();
        assert_eq!(answer.text, "Let me look.");
        assert_eq!(
            answer.tool_calls,
            vec![
                ("get_weather".to_string(), json!({ "city": "Rome" })),
                ("get_time".to_string(), json!({})),
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
        assert_eq!(stream.feed(body.as_bytes()).unwrap(), vec!["Hi"]);
        assert!(stream.end().unwrap().is_empty());
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
}

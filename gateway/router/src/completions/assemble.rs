//! Answers the router reads from providers: a whole `chat.completion` body, or an event stream
//! assembled as it arrives into one answer.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::chat::{FinishReason, ToolCall, Usage};

use super::*;

/// A finished answer read from a whole `chat.completion` body.
pub fn parse_completion(body: &Value) -> Result<Assembled, FormatError> {
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
    Ok(Assembled {
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

pub(crate) fn read_usage(usage: &Value) -> Option<Usage> {
    usage.is_object().then(|| Usage {
        prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0) as usize,
        completion_tokens: usage["completion_tokens"].as_u64().unwrap_or(0) as usize,
    })
}

pub(crate) fn finish_reason_of(reason: Option<&str>, has_calls: bool) -> FinishReason {
    match reason {
        Some("length") => FinishReason::Length,
        Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
        _ if has_calls => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    }
}

/// Tool-call arguments as JSON text that parses (empty arguments are `{}`).
pub(crate) fn checked_arguments(
    name: &str,
    arguments: &str,
    cut: bool,
) -> Result<String, FormatError> {
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
        )
        .into()),
    }
}

/// A provider's whole answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
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
pub(crate) struct PartialCall {
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
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Fed, FormatError> {
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

    /// The body ended: takes in a last line or event that lacked its line break or blank line.
    pub fn end(&mut self) -> Result<Fed, FormatError> {
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
    pub fn finish(mut self) -> Result<Assembled, FormatError> {
        self.end()?;
        if !self.done && self.finish_reason.is_none() {
            return Err("the stream ended before the answer was complete".into());
        }
        let cut = self.finish_reason.as_deref() == Some("length");
        let mut tool_calls = Vec::with_capacity(self.tool_calls.len());
        for (index, call) in std::mem::take(&mut self.tool_calls) {
            if call.name.is_empty() {
                return Err(format!("tool call {index} (id `{}`) has no name", call.id).into());
            }
            let arguments = checked_arguments(&call.name, &call.arguments, cut)?;
            tool_calls.push(ToolCall {
                id: call.id,
                name: call.name,
                arguments,
            });
        }
        Ok(Assembled {
            finish_reason: finish_reason_of(self.finish_reason.as_deref(), !tool_calls.is_empty()),
            text: self.text,
            tool_calls,
            usage: self.usage,
            model: self.model,
            fragments: self.fragments,
        })
    }

    /// One line, without its line break.
    fn line(&mut self, line: &[u8], fed: &mut Fed) -> Result<(), FormatError> {
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

    /// The end of an event: takes in its data.
    fn dispatch(&mut self, fed: &mut Fed) -> Result<(), FormatError> {
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

    fn chunk(&mut self, chunk: &Value, fed: &mut Fed) -> Result<(), FormatError> {
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string());
            return Err(format!("the stream reported an error: {message}").into());
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

//! Connects the session actors' `ModelClient` to the local inference pool: the binary is where
//! `stead-actors` and `stead-inference` meet, so neither names the other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use stead_actors::session::{ModelClient, ModelRequest};
use stead_actors::{ModelOutput, TranscriptEntry, Usage};
use stead_inference::pool::InferencePool;
use stead_inference::{
    ChatMessage, ChatRequest, Role, SamplingParams, StreamEvent, ToolCall, ToolChoice, ToolSpec,
};
use tokio::sync::mpsc::UnboundedSender;

/// A local model served by an [`InferencePool`].
pub struct LocalModel {
    pub pool: Arc<InferencePool>,
    pub max_tokens: usize,
}

/// The chat request for one model call of a session.
pub fn chat_request(model: &str, request: &ModelRequest, max_tokens: usize) -> ChatRequest {
    let mut messages = Vec::with_capacity(request.transcript.len() + 1);
    if !request.system_prompt.is_empty() {
        messages.push(ChatMessage::system(request.system_prompt.clone()));
    }
    for entry in &request.transcript {
        messages.push(match entry {
            TranscriptEntry::User { text } => ChatMessage::user(text.clone()),
            TranscriptEntry::Assistant { text, tool_calls } => ChatMessage {
                role: Role::Assistant,
                content: text.clone(),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| ToolCall {
                        id: c.call_id.clone(),
                        name: c.tool.clone(),
                        arguments: c.arguments.to_string(),
                    })
                    .collect(),
                tool_call_id: None,
            },
            TranscriptEntry::Tool {
                call_id, content, ..
            } => ChatMessage {
                role: Role::Tool,
                content: content.to_string(),
                tool_calls: Vec::new(),
                tool_call_id: Some(call_id.clone()),
            },
        });
    }
    ChatRequest {
        model: model.to_string(),
        messages,
        tools: request
            .tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.parameters.clone(),
            })
            .collect(),
        tool_choice: ToolChoice::Auto,
        sampling: SamplingParams {
            max_tokens,
            ..Default::default()
        },
    }
}

#[async_trait]
impl ModelClient for LocalModel {
    async fn complete(
        &self,
        request: ModelRequest,
        deltas: UnboundedSender<String>,
        cancel: Arc<AtomicBool>,
    ) -> Result<ModelOutput, String> {
        let chat = chat_request(self.pool.model_name(), &request, self.max_tokens);
        let mut generation = self.pool.generate(chat).await.map_err(|e| e.to_string())?;
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tokio::select! {
                event = generation.next() => match event {
                    Some(StreamEvent::Delta(text)) => {
                        let _ = deltas.send(text);
                    }
                    Some(StreamEvent::Done(completion)) => {
                        return Ok(ModelOutput {
                            text: completion.text,
                            tool_calls: completion
                                .tool_calls
                                .into_iter()
                                .map(|c| {
                                    let arguments: Value =
                                        serde_json::from_str(&c.arguments).unwrap_or(Value::Null);
                                    (c.name, arguments)
                                })
                                .collect(),
                            usage: Usage {
                                prompt_tokens: completion.usage.prompt_tokens as u64,
                                completion_tokens: completion.usage.completion_tokens as u64,
                            },
                            provider: "local".into(),
                            model: completion.model,
                            latency_ms: completion.timings.total_ms,
                            ttft_ms: completion.timings.ttft_ms,
                            cost: 0.0,
                        });
                    }
                    Some(StreamEvent::Failed(error)) => return Err(error.to_string()),
                    None => return Err("the inference pool stopped".into()),
                },
                _ = tick.tick() => {
                    if cancel.load(Ordering::Relaxed) {
                        generation.cancel();
                        return Err("cancelled".into());
                    }
                }
            }
        }
    }
}

//! The exact-match answer cache: what it keeps, its key (the route and the normalized request),
//! and how a hit is answered.

use std::time::Instant;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

use crate::chat::{FinishReason, ToolCall, Usage};
use crate::provider::RouterRequest;
use crate::{completions, CacheStatus, Router, RouterResponse};

/// An answer as the cache keeps it.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) text: String,
    pub(crate) tool_calls: Vec<ToolCall>,
    pub(crate) finish_reason: FinishReason,
    pub(crate) usage: Usage,
    pub(crate) provider: String,
    pub(crate) model: String,
    pub(crate) system: String,
}

impl Router {
    /// A cached answer, streamed as one piece when the caller streams.
    pub(crate) fn hit(
        &self,
        id: Uuid,
        answer: &Answer,
        deltas: Option<UnboundedSender<String>>,
        started: Instant,
    ) -> RouterResponse {
        if let Some(deltas) = deltas {
            if !answer.text.is_empty() {
                let _ = deltas.send(answer.text.clone());
            }
        }
        let latency = started.elapsed();
        RouterResponse {
            id,
            text: answer.text.clone(),
            tool_calls: answer.tool_calls.clone(),
            finish_reason: answer.finish_reason,
            usage: answer.usage,
            provider: answer.provider.clone(),
            model: answer.model.clone(),
            system: answer.system.clone(),
            cache: CacheStatus::Hit,
            attempts: Vec::new(),
            latency,
            ttft: Some(latency),
            cost: 0.0,
            guardrails: Vec::new(),
        }
    }
}

impl RouterResponse {
    pub(crate) fn into_answer(self) -> Answer {
        Answer {
            text: self.text,
            tool_calls: self.tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
            provider: self.provider,
            model: self.model,
            system: self.system,
        }
    }
}

/// `value` with every object's keys in sorted order (serde_json may keep insertion order).
pub(crate) fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The exact-match cache key: a digest of the caller's API key (the scope: one key never
/// gets another's cached answer — a hit would tell it someone sent the same prompt, and hand
/// it their answer), the route and the normalized request (JSON with sorted keys).
pub(crate) fn cache_key(request: &RouterRequest, scope: Option<&str>) -> [u8; 32] {
    let normalized = json!({
        "scope": scope,
        "route": request.route,
        "messages": request.messages,
        "tools": request.tools,
        "tool_choice": completions::tool_choice_json(&request.tool_choice),
        "params": request.params,
        "extra": request.extra,
    });
    Sha256::digest(canonical(&normalized).to_string().as_bytes()).into()
}

//! Wires the model router (`stead_router`) into the binary: its providers from
//! `[[providers]]` (the started local pools and OpenAI-compatible APIs), its request log into
//! the database, and the session actors' `ModelClient` onto it, so sessions and the
//! OpenAI-compatible endpoint share one router (`docs/architecture.md`: the binary is where the
//! crates meet).

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use serde_json::Value;
use stead_actors::session::{ModelClient, ModelError, ModelRequest, PromptSize};
use stead_actors::{Attachment, ModelOutput, TranscriptEntry, Usage};
use stead_artifacts::BlobStore;
use stead_inference::pool::InferencePool;
use stead_inference::provider::{OnnxEmbeddingProvider, OnnxProvider};
use stead_persistence::RequestLog;
use stead_router::chat::{ChatMessage, Image, Role, ToolCall, ToolChoice, ToolSpec};
use stead_router::log::{RequestLogEntry, RequestLogSink, SinkError};
use stead_router::providers::anthropic::AnthropicProvider;
use stead_router::providers::openai::OpenAiProvider;
use stead_router::{CallOptions, Provider, Providers, Router, RouterRequest, SharedLedger};
use tokio::sync::mpsc::UnboundedSender;

use stead_config::{Config, ProviderKind};

/// The key of a remote provider, from the variable its `api_key_env` names.
fn api_key(provider: &stead_config::ProviderConfig) -> Option<String> {
    provider.api_key_env.as_ref().and_then(|var| {
        let key = std::env::var(var).ok();
        if key.is_none() {
            tracing::warn!(provider = %provider.name, variable = %var,
                "the API key variable is not set; calling without a key");
        }
        key
    })
}

/// The most bytes of one answer of a remote provider (`max_answer_mib`, default 16 MiB).
fn answer_limit(provider: &stead_config::ProviderConfig) -> usize {
    provider
        .max_answer_mib
        .map_or(stead_router::answer::MAX_ANSWER_BYTES, |mib| {
            mib.saturating_mul(1 << 20)
        })
}

/// The budgets beyond the installation's (a virtual key's, its project's) and the ledger that
/// holds them.
pub type Directory = (
    Arc<dyn stead_router::BudgetDirectory>,
    Arc<dyn SharedLedger>,
);

/// Builds the router over the started local pools (by provider name), logging into `store`,
/// its strict budgets kept in `budgets` when given (a cluster's shared ledger), the budgets of
/// projects' keys from `directory` when given.
pub fn build(
    config: &Config,
    pools: &[(String, Arc<InferencePool>)],
    embedders: &[crate::engines::EmbeddingModel],
    store: Option<Arc<dyn RequestLog>>,
    (budgets, directory): (Option<Arc<dyn SharedLedger>>, Option<Directory>),
) -> anyhow::Result<Arc<Router>> {
    let client = reqwest::Client::builder()
        .user_agent(concat!("stead/", env!("CARGO_PKG_VERSION")))
        .build()?;
    let mut providers = Providers::new();
    for provider in &config.providers {
        let built: Option<Arc<dyn Provider>> = match provider.kind {
            ProviderKind::Onnx => {
                pools
                    .iter()
                    .find(|(name, _)| *name == provider.name)
                    .map(|(_, pool)| {
                        Arc::new(OnnxProvider::new(provider.name.clone(), pool.clone()))
                            as Arc<dyn Provider>
                    })
            }
            ProviderKind::OnnxEmbedding => embedders
                .iter()
                .find(|(name, _, _)| *name == provider.name)
                .map(|(name, model, pool)| {
                    Arc::new(OnnxEmbeddingProvider::new(
                        name.clone(),
                        model.clone(),
                        pool.clone(),
                    )) as Arc<dyn Provider>
                }),
            ProviderKind::Openai => Some(Arc::new(
                OpenAiProvider::new(
                    provider.name.clone(),
                    provider.base_url.as_deref().unwrap_or_default(),
                    api_key(provider),
                    client.clone(),
                )
                .with_answer_limit(answer_limit(provider)),
            )),
            ProviderKind::Anthropic => Some(Arc::new(
                AnthropicProvider::new(
                    provider.name.clone(),
                    provider.base_url.as_deref().unwrap_or_default(),
                    api_key(provider),
                    client.clone(),
                )
                .with_answer_limit(answer_limit(provider)),
            )),
        };
        providers.insert(provider.name.clone(), built);
    }
    let sink = store.map(|store| Arc::new(StoreSink { store }) as Arc<dyn RequestLogSink>);
    let guardrails = stead_guardrails::Guardrails::build(&config.guardrails)
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let router = Router::new(&config.routes, config.gateway.clone(), &providers, sink)
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?
        .with_guardrails(guardrails)
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let router = match budgets {
        Some(ledger) => router.with_shared_budgets(ledger),
        None => router,
    };
    let router = match directory {
        Some((directory, ledger)) => router.with_budget_directory(directory, ledger),
        None => router,
    };
    Ok(Arc::new(
        match crate::budget_alerts::WebhookAlerts::from_config(&config.budget_alerts)? {
            Some(alerts) => router.with_budget_alerts(Arc::new(alerts)),
            None => router,
        },
    ))
}

/// Writes request-log batches into the database.
struct StoreSink {
    store: Arc<dyn RequestLog>,
}

#[async_trait]
impl RequestLogSink for StoreSink {
    async fn write(&self, records: Vec<RequestLogEntry>) -> Result<(), SinkError> {
        self.store
            .insert_request_log(&records)
            .await
            .map_err(|e| SinkError(e.to_string()))
    }
}

/// The router request for one model call of a session: the system prompt, then the
/// transcript (assistant tool calls with their arguments as JSON text; each tool result as a
/// `tool` message whose content is the result's JSON text, the string itself when the result
/// is a JSON string, or a sentence for a failure), and the agent's tools; a repair call offers
/// no tools and ends with the repair instruction as a system message.
pub fn router_request(request: &ModelRequest) -> RouterRequest {
    let mut messages = Vec::with_capacity(request.transcript.len() + 1);
    if !request.system_prompt.is_empty() {
        messages.push(ChatMessage::system(request.system_prompt.clone()));
    }
    for entry in &request.transcript {
        messages.push(match entry {
            TranscriptEntry::User { text, .. } => ChatMessage::user(text.clone()),
            TranscriptEntry::Assistant { text, tool_calls } => ChatMessage {
                role: Role::Assistant,
                content: text.clone(),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| ToolCall {
                        id: c.call_id.to_string(),
                        name: c.tool.clone(),
                        arguments: c.arguments.to_string(),
                    })
                    .collect(),
                tool_call_id: None,
                images: Vec::new(),
            },
            TranscriptEntry::Tool {
                call_id, content, ..
            } => ChatMessage {
                role: Role::Tool,
                content: tool_content(content),
                tool_calls: Vec::new(),
                tool_call_id: Some(call_id.to_string()),
                images: Vec::new(),
            },
        });
    }
    if request.repair {
        messages.push(ChatMessage::system(
            stead_actors::reply::REPAIR_INSTRUCTION.to_string(),
        ));
    }
    RouterRequest {
        route: request.route.clone(),
        tool_choice: if request.repair {
            ToolChoice::None
        } else {
            ToolChoice::Auto
        },
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
        ..Default::default()
    }
}

/// A tool result as the model reads it: a string as itself, anything else as JSON text. A
/// rejection (`{"error": "rejected by {decider}[: {reason}]"}`, as decide.rs records it) reads
/// `{"error": "not done: the person reviewing this call rejected it (reason)"}`: who decided is
/// an id the model has no use for, and echoes into the reply.
fn tool_content(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Object(map) if map.len() == 1 => match map.get("error") {
            Some(Value::String(error)) => match error.strip_prefix("rejected by ") {
                Some(rest) => {
                    let reason = rest
                        .split_once(": ")
                        .map(|(_, reason)| reason.trim())
                        .filter(|r| !r.is_empty() && *r != "rejected");
                    let said = match reason {
                        Some(reason) => format!(
                            "not done: the person reviewing this call rejected it ({reason})"
                        ),
                        None => "not done: the person reviewing this call rejected it".into(),
                    };
                    serde_json::json!({ "error": said }).to_string()
                }
                None => content.to_string(),
            },
            _ => content.to_string(),
        },
        other => other.to_string(),
    }
}

/// A tool call's arguments as the model wrote them: the JSON they hold, or — when they do not
/// parse — the raw text as a JSON string, which the argument check refuses back to the model
/// (it used to become `{}` silently and run).
pub fn tool_arguments(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

/// The session actors' model client: every call goes through the router.
pub struct SessionModel {
    pub router: Arc<Router>,
    /// Where the messages' attachments are read from (`None`: none can be).
    pub blobs: Option<BlobStore>,
}

impl SessionModel {
    /// The client the session registry takes.
    pub fn shared(router: Arc<Router>, blobs: Option<BlobStore>) -> Arc<Self> {
        Arc::new(SessionModel { router, blobs })
    }

    /// The router request with the user messages' attachments in it: an image's bytes as a
    /// `data:` URL where the route has a model that sees images; otherwise — any other file,
    /// an image to a text-only route, or bytes the store no longer has — a line of text
    /// naming it, so the model knows something was attached (docs/artifacts.md).
    async fn with_attachments(&self, request: &ModelRequest) -> RouterRequest {
        let mut routed = router_request(request);
        let sees_images = self.router.route_sees_images(&request.route) == Some(true);
        // `router_request` makes one message per transcript entry, after the system prompt.
        let offset = usize::from(!request.system_prompt.is_empty());
        for (i, entry) in request.transcript.iter().enumerate() {
            let TranscriptEntry::User { attachments, .. } = entry else {
                continue;
            };
            for attachment in attachments {
                let image = sees_images && attachment.is_image();
                let readable = image || is_short_text(attachment);
                let bytes = match (&self.blobs, readable) {
                    (Some(blobs), true) => blobs.get(&attachment.sha256, None).await.ok(),
                    _ => None,
                };
                let message = &mut routed.messages[offset + i];
                match (bytes, image) {
                    (Some(bytes), true) => message.images.push(Image::base64(
                        &attachment.content_type,
                        &base64::engine::general_purpose::STANDARD.encode(&bytes),
                    )),
                    // A document reads best before the question about it.
                    (Some(bytes), false) => {
                        message.content = format!(
                            "{}\n{}\n[end of attachment]\n\n{}",
                            attachment_note(attachment).trim_start(),
                            String::from_utf8_lossy(&bytes).trim_end(),
                            message.content
                        );
                    }
                    (None, _) => message.content.push_str(&attachment_note(attachment)),
                }
            }
        }
        if let (Some(blobs), true) = (&self.blobs, sees_images) {
            crate::tool_artifacts::show_tool_images(
                blobs,
                &request.transcript,
                &mut routed.messages,
                offset,
            )
            .await;
        }
        routed
    }
}

/// The most bytes of a text attachment (plain text, Markdown, CSV, JSON) put into the message
/// itself, so that a model reads it; a longer one is named only.
pub const TEXT_ATTACHMENT_BYTES: i64 = 16 * 1024;

fn is_short_text(attachment: &Attachment) -> bool {
    let kind = attachment.content_type.as_str();
    (kind.starts_with("text/") || kind == "application/json")
        && attachment.size <= TEXT_ATTACHMENT_BYTES
}

/// The line a model reads for an attachment it is not shown (and before a text one's words).
fn attachment_note(attachment: &Attachment) -> String {
    format!(
        "\n[attached: {}, {} bytes, artifact {}]",
        attachment.content_type, attachment.size, attachment.artifact_id
    )
}

#[async_trait]
impl ModelClient for SessionModel {
    /// Counted by the local model's tokenizer when the route's first target is local; an
    /// estimate otherwise.
    async fn measure(&self, request: &ModelRequest) -> PromptSize {
        match self.router.measure(&router_request(request)) {
            Some((tokens, window)) => PromptSize {
                tokens,
                window: Some(window),
                exact: true,
            },
            None => stead_actors::session::estimate(request),
        }
    }

    async fn complete(
        &self,
        request: ModelRequest,
        deltas: UnboundedSender<String>,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<ModelOutput, ModelError> {
        // Charged to whoever created the session, under the same per-key limits and budgets
        // as their `/v1/chat/completions` calls; logged with the session's metadata.
        let options = CallOptions {
            session_id: Some(request.session_id),
            api_key: Some(request.principal.clone()),
            metadata: stead_router::log_metadata(&request.metadata),
            budget_grant_usd: request.budget_grant_usd,
            ..Default::default()
        };
        let routed = self.with_attachments(&request).await;
        let call = self.router.call(routed, options, Some(deltas));
        // Cancelling drops the call, which stops its attempt (and writes no log record).
        let response = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(ModelError::Cancelled),
            response = call => response.map_err(|e| {
                // A key's or a project's budget parks the session for a person to decide.
                if let Some(budget) = &e.budget {
                    return ModelError::Budget(stead_actors::BudgetRefusal {
                        budget: budget.name.clone(),
                        needed_usd: budget.shortfall(),
                        message: format!("{}: {}", e.code, e.message),
                    });
                }
                // A refusal by a limit or budget names its code: the journal says why. An
                // upstream's own error text stays in the request log.
                if e.code.is_limit() {
                    ModelError::Failed(format!("{}: {}", e.code, e.message))
                } else {
                    ModelError::Failed(e.for_session().to_string())
                }
            })?,
        };
        Ok(ModelOutput {
            text: response.text,
            tool_calls: response
                .tool_calls
                .into_iter()
                .map(|c| {
                    let arguments = tool_arguments(&c.arguments);
                    (c.name, arguments)
                })
                .collect(),
            usage: Usage {
                prompt_tokens: response.usage.prompt_tokens as u64,
                completion_tokens: response.usage.completion_tokens as u64,
            },
            provider: response.provider,
            model: response.model,
            latency_ms: response.latency.as_secs_f64() * 1000.0,
            ttft_ms: response.ttft.unwrap_or(response.latency).as_secs_f64() * 1000.0,
            cost: response.cost,
            guardrails: response.guardrails,
        })
    }
}

/// A judge for evaluations (`stead_evals::Judge`): one user message to a route, at
/// temperature 0, charged to the evaluation principal.
pub struct RouterJudge {
    pub router: Arc<Router>,
}

#[async_trait::async_trait]
impl stead_evals::Judge for RouterJudge {
    async fn ask(&self, route: &str, prompt: &str) -> Result<String, stead_evals::JudgeError> {
        let request = stead_model::RouterRequest {
            route: route.to_string(),
            messages: vec![stead_model::chat::ChatMessage::user(prompt)],
            params: stead_model::Params {
                temperature: Some(0.0),
                ..Default::default()
            },
            ..Default::default()
        };
        let options = CallOptions {
            api_key: Some(stead_evals::run::EVAL_PRINCIPAL.into()),
            ..Default::default()
        };
        self.router
            .call(request, options, None)
            .await
            .map(|answer| answer.text)
            .map_err(|e| stead_evals::JudgeError(format!("{}: {}", e.code, e.message)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use stead_actors::session::ToolSpec as AgentTool;
    use stead_actors::RequestedCall;
    use stead_router::completions::provider_body;

    use super::*;

    fn call(call_id: &str, city: &str) -> RequestedCall {
        RequestedCall {
            call_id: call_id.into(),
            tool: "get_weather".into(),
            arguments: json!({ "city": city }),
        }
    }

    #[test]
    fn rejections_reach_the_model_without_the_deciders_id() {
        assert_eq!(
            tool_content(&json!({ "error": "rejected by session_token:01a2-77: not now" })),
            r#"{"error":"not done: the person reviewing this call rejected it (not now)"}"#
        );
        assert_eq!(
            tool_content(&json!({ "error": "rejected by ada: rejected" })),
            r#"{"error":"not done: the person reviewing this call rejected it"}"#
        );
        assert_eq!(
            tool_content(&json!({ "error": "division by zero" })),
            r#"{"error":"division by zero"}"#
        );
        assert_eq!(tool_content(&json!("12:00")), "12:00");
        assert_eq!(tool_content(&json!({ "value": 391 })), r#"{"value":391}"#);
    }

    #[test]
    fn unparseable_tool_arguments_stay_as_text_for_the_check_to_refuse() {
        assert_eq!(
            tool_arguments(r#"{"city":"Paris"}"#),
            json!({ "city": "Paris" })
        );
        assert_eq!(tool_arguments("{city: Paris"), json!("{city: Paris"));
        assert!(stead_actors::ArgumentSchema::default()
            .check(&tool_arguments("{city: Paris"))
            .is_some());
    }

    #[test]
    fn a_transcript_with_tool_calls_maps_onto_openai_messages() {
        let request = ModelRequest {
            session_id: uuid::Uuid::nil(),
            route: "default".into(),
            system_prompt: "Be brief.".into(),
            transcript: vec![
                TranscriptEntry::User {
                    text: "Weather in Paris and Rome?".into(),
                    attachments: Vec::new(),
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
            ]
            .into(),
            tools: vec![AgentTool {
                name: "get_weather".into(),
                description: "Current weather of a city.".into(),
                parameters: json!({ "type": "object", "properties": { "city": { "type": "string" } } }),
            }],
            principal: "local".into(),
            metadata: Default::default(),
            repair: false,
            budget_grant_usd: None,
        };
        let tool_call = |id: &str, city: &str| {
            json!({
                "id": id,
                "type": "function",
                "function": { "name": "get_weather", "arguments": format!("{{\"city\":\"{city}\"}}") },
            })
        };
        assert_eq!(
            provider_body("gpt-test", &router_request(&request), Some(256), "", true),
            json!({
                "model": "gpt-test",
                "messages": [
                    { "role": "system", "content": "Be brief." },
                    { "role": "user", "content": "Weather in Paris and Rome?" },
                    {
                        "role": "assistant",
                        "content": null,
                        "tool_calls": [tool_call("call_1", "Paris"), tool_call("call_2", "Rome")],
                    },
                    { "role": "tool", "tool_call_id": "call_1", "content": "{\"temp\":21}" },
                    { "role": "tool", "tool_call_id": "call_2", "content": "sunny" },
                    { "role": "assistant", "content": "Paris is 21°C, Rome is sunny." },
                ],
                "tools": [{
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "description": "Current weather of a city.",
                        "parameters": { "type": "object", "properties": { "city": { "type": "string" } } },
                    },
                }],
                "tool_choice": "auto",
                "max_tokens": 256,
                "stream": true,
                "stream_options": { "include_usage": true },
            })
        );
    }
}

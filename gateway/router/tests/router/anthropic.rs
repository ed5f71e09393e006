//! The `anthropic` provider against the upstream double's Messages API: a whole answer (the
//! request in Anthropic's shape: `system`, `max_tokens`, `x-api-key`, `anthropic-version`), a
//! streamed one word by word, a tool call streamed as `input_json_delta`s, and a route that
//! falls back from Anthropic to an OpenAI-compatible provider when the first fails.

use super::*;
use stead_router::chat::{FinishReason, ToolCall, ToolSpec};
use stead_router::providers::anthropic::AnthropicProvider;

#[tokio::test]
async fn anthropic_answers_streams_tools_and_falls_back_across_vendors() {
    let claude = Upstream::start(
        vec![
            Reply::text("Bonjour le monde"),
            Reply::paced("Once upon a time", Duration::from_millis(5)),
            Reply::tool("clock", json!({ "tz": "Europe/Paris" })),
            Reply::status(500),
        ],
        Reply::text("unused"),
    )
    .await;
    let gpt = Upstream::start(Vec::new(), Reply::text("from openai")).await;
    let mut providers = Providers::new();
    providers.insert(
        "claude".into(),
        Some(Arc::new(AnthropicProvider::new(
            "claude",
            &claude.anthropic_base_url(),
            Some("sk-ant-test".into()),
            reqwest::Client::new(),
        )) as Arc<dyn Provider>),
    );
    providers.insert(
        "gpt".into(),
        Some(Arc::new(OpenAiProvider::new(
            "gpt",
            &gpt.base_url,
            None,
            reqwest::Client::new(),
        )) as Arc<dyn Provider>),
    );
    let routes: Vec<RouteConfig> = serde_json::from_value(json!([{ "name": "r", "targets": [
        { "provider": "claude", "model": "claude-x", "retry": fast_retry(1) },
        { "provider": "gpt", "model": "g" },
    ] }]))
    .unwrap();
    let router = Router::new(&routes, GatewayConfig::default(), &providers, None).unwrap();

    let mut request = ask("r", "Say hello in French.");
    request.messages.insert(0, ChatMessage::system("Be brief."));
    let whole = router
        .call(request, CallOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(
        (
            whole.text.as_str(),
            whole.provider.as_str(),
            whole.model.as_str()
        ),
        ("Bonjour le monde", "claude", "claude-x")
    );
    assert_eq!(whole.usage.completion_tokens, 3);
    let sent = &claude.requests()[0];
    assert_eq!(
        (
            sent["model"].clone(),
            sent["system"].clone(),
            sent["max_tokens"].clone()
        ),
        (json!("claude-x"), json!("Be brief."), json!(4096))
    );
    assert_eq!(
        sent["messages"],
        json!([{ "role": "user", "content": [{ "type": "text", "text": "Say hello in French." }] }])
    );
    assert_eq!(claude.anthropic_keys()[0].as_deref(), Some("sk-ant-test"));

    let (text, answer) = stream(&router, ask("r", "A story?"), CallOptions::default()).await;
    let answer = answer.unwrap();
    assert_eq!(
        (text.as_str(), answer.text.as_str()),
        ("Once upon a time", "Once upon a time")
    );
    assert_eq!(answer.finish_reason, FinishReason::Stop);

    let mut tools = ask("r", "What time is it in Paris?");
    tools.tools = vec![ToolSpec {
        name: "clock".into(),
        description: "the time".into(),
        parameters: json!({ "type": "object" }),
    }];
    let (_, called) = stream(&router, tools, CallOptions::default()).await;
    let called = called.unwrap();
    assert_eq!(called.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        called.tool_calls,
        vec![ToolCall {
            id: "toolu_double_0".into(),
            name: "clock".into(),
            arguments: r#"{"tz":"Europe/Paris"}"#.into(),
        }]
    );
    assert_eq!(
        claude.requests()[2]["tools"],
        json!([{ "name": "clock", "description": "the time", "input_schema": { "type": "object" } }])
    );

    // Anthropic answers 500: the route falls back to the OpenAI-compatible target.
    let fallback = router
        .call(ask("r", "Anyone there?"), CallOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(
        (fallback.text.as_str(), fallback.provider.as_str()),
        ("from openai", "gpt")
    );
    let outcomes: Vec<(&str, &str)> = fallback
        .attempts
        .iter()
        .map(|a| (a.provider.as_str(), a.outcome.as_str()))
        .collect();
    assert_eq!(outcomes, [("claude", "error"), ("gpt", "ok")]);
}

//! Images through routes: a target whose model sees none is skipped (recorded `skipped`,
//! `images`), the next one gets the image; a route with no model that sees images refuses the
//! call before any limit or provider counts it; a call without images still uses every
//! target.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use stead_router::chat::{ChatMessage, FinishReason, Image, Usage};
use stead_router::config::{GatewayConfig, RouteConfig};
use stead_router::providers::openai::OpenAiProvider;
use stead_router::{
    CallOptions, Provider, ProviderCall, ProviderError, ProviderReply, Providers, Router,
    RouterRequest,
};
use stead_testkit::upstream::{Reply, Upstream};

/// Test double: a provider whose model reads text only, answering `text-only`.
struct TextOnly;

#[async_trait]
impl Provider for TextOnly {
    fn name(&self) -> &str {
        "reader"
    }

    fn system(&self) -> &str {
        "double"
    }

    fn sees_images(&self, _model: &str) -> bool {
        false
    }

    async fn chat(&self, _call: ProviderCall<'_>) -> Result<ProviderReply, ProviderError> {
        Ok(ProviderReply {
            text: "text-only".into(),
            tool_calls: Vec::new(),
            finish_reason: FinishReason::Stop,
            usage: Usage::default(),
            model: "t".into(),
        })
    }
}

fn with_image(route: &str) -> RouterRequest {
    RouterRequest {
        route: route.into(),
        messages: vec![ChatMessage {
            images: vec![Image::base64("image/png", "iVBORw0KGgo=")],
            ..ChatMessage::user("What is this?")
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn images_skip_the_targets_that_cannot_see_them() {
    let up = Upstream::start(vec![], Reply::text("a picture")).await;
    let mut providers = Providers::new();
    providers.insert(
        "reader".to_string(),
        Some(Arc::new(TextOnly) as Arc<dyn Provider>),
    );
    providers.insert(
        "up".to_string(),
        Some(Arc::new(OpenAiProvider::new(
            "up",
            &up.base_url,
            None,
            reqwest::Client::new(),
        )) as Arc<dyn Provider>),
    );
    let routes: Vec<RouteConfig> = serde_json::from_value(json!([
        { "name": "mixed", "targets": [
            { "provider": "reader", "model": "t" }, { "provider": "up", "model": "m" } ] },
        { "name": "blind", "targets": [{ "provider": "reader", "model": "t" }] },
        { "name": "declared", "images": false, "targets": [{ "provider": "up", "model": "m" }] },
    ]))
    .unwrap();
    let router = Router::new(&routes, GatewayConfig::default(), &providers, None).unwrap();
    assert_eq!(router.route_sees_images("mixed"), Some(true));
    assert_eq!(router.route_sees_images("blind"), Some(false));
    assert_eq!(router.route_sees_images("declared"), Some(false));
    assert_eq!(router.route_sees_images("nowhere"), None);

    // Text goes to the first target; an image skips it for the one that sees.
    let text = router
        .call(
            RouterRequest {
                route: "mixed".into(),
                messages: vec![ChatMessage::user("hi")],
                ..Default::default()
            },
            CallOptions::default(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(text.text, "text-only");
    let seen = router
        .call(with_image("mixed"), CallOptions::default(), None)
        .await
        .unwrap();
    assert_eq!(seen.text, "a picture");
    assert_eq!(seen.attempts[0].outcome, "skipped");
    assert_eq!(seen.attempts[0].error_kind.as_deref(), Some("images"));
    assert_eq!(
        up.requests()[0]["messages"][0]["content"],
        json!([
            { "type": "text", "text": "What is this?" },
            { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=" } },
        ])
    );

    // No model of the route sees images: refused, naming the route; nothing was called.
    for route in ["blind", "declared"] {
        let error = router
            .call(with_image(route), CallOptions::default(), None)
            .await
            .unwrap_err();
        assert_eq!(error.code.as_str(), "images_unsupported");
        assert!(
            error.message.contains(&format!("`{route}`")),
            "{}",
            error.message
        );
        assert!(error.attempts.is_empty());
    }
    assert_eq!(up.requests().len(), 1);
}

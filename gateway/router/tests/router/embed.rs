//! Embeddings through the router: a target that cannot be reached falls back to the next, the
//! answer is cached (the second identical call reaches no upstream), an unknown route is
//! refused, and each call leaves one log record with its tokens and cost.

use super::*;
use stead_router::EmbedRequest;
use stead_testkit::upstream::bag_of_words;

fn embed(route: &str, inputs: &[&str]) -> EmbedRequest {
    EmbedRequest {
        route: route.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
    }
}

#[tokio::test]
async fn embeddings_fall_back_are_cached_and_logged() {
    let up = Upstream::start(Vec::new(), Reply::text("unused")).await;
    // Provider `a` listens nowhere (port 9, discard): its attempts fail to connect.
    let mut providers = Providers::new();
    for (name, base) in [("a", "http://127.0.0.1:9/v1"), ("b", up.base_url.as_str())] {
        providers.insert(
            name.into(),
            Some(Arc::new(OpenAiProvider::new(
                name,
                base,
                None,
                reqwest::Client::new(),
            )) as Arc<dyn Provider>),
        );
    }
    let routes: Vec<RouteConfig> = serde_json::from_value(json!([{ "name": "embed", "targets": [
        { "provider": "a", "model": "e", "retry": fast_retry(2) },
        { "provider": "b", "model": "e" },
    ] }]))
    .unwrap();
    let gateway: GatewayConfig = serde_json::from_value(
        json!({ "cache": { "enabled": true }, "prices": { "b/e": { "input": 2.0, "output": 0.0 } } }),
    )
    .unwrap();
    let sink = Arc::new(MemorySink::default());
    let setup = Setup {
        router: Arc::new(
            Router::new(
                &routes,
                gateway,
                &providers,
                Some(sink.clone() as Arc<dyn RequestLogSink>),
            )
            .unwrap(),
        ),
        sink,
    };

    let first = setup
        .router
        .embed(
            embed("embed", &["green tea", "a flat tyre"]),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        first.vectors,
        vec![bag_of_words("green tea"), bag_of_words("a flat tyre")]
    );
    assert_eq!((first.provider.as_str(), first.prompt_tokens), ("b", 5));
    assert_eq!(first.cache, CacheStatus::Miss);
    let outcomes: Vec<(&str, &str)> = first
        .attempts
        .iter()
        .map(|a| (a.provider.as_str(), a.outcome.as_str()))
        .collect();
    assert_eq!(outcomes, [("a", "error"), ("a", "error"), ("b", "ok")]);
    assert!((first.cost - 2.0 * 5.0 / 1e6).abs() < 1e-12);

    let calls = up.requests().len();
    let second = setup
        .router
        .embed(
            embed("embed", &["green tea", "a flat tyre"]),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(second.cache, CacheStatus::Hit);
    assert_eq!(second.vectors, first.vectors);
    assert_eq!(up.requests().len(), calls, "a hit reaches no upstream");
    let bypass = setup
        .router
        .embed(
            embed("embed", &["green tea", "a flat tyre"]),
            CallOptions {
                cache: CacheMode::Bypass,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(bypass.cache, CacheStatus::Bypass);
    // The cache is per key — another key misses (and pays) where the keyless
    // caller hit, so a hit tells no key what another embedded.
    let keyed = CallOptions {
        api_key: Some("key-b".into()),
        ..Default::default()
    };
    let other = setup
        .router
        .embed(embed("embed", &["green tea", "a flat tyre"]), keyed.clone())
        .await
        .unwrap();
    assert_eq!(other.cache, CacheStatus::Miss);
    let again = setup
        .router
        .embed(embed("embed", &["green tea", "a flat tyre"]), keyed)
        .await
        .unwrap();
    assert_eq!(again.cache, CacheStatus::Hit);

    let unknown = setup
        .router
        .embed(embed("nope", &["x"]), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(unknown.code, "unknown_route");

    let records = setup.sink.records(6).await;
    let summary: Vec<(String, String, u64, bool)> = records
        .iter()
        .map(|r| {
            (
                r.route.clone(),
                r.status.to_string(),
                r.tokens_in,
                r.cache_hit,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("embed".to_string(), "ok".to_string(), 5, false),
            ("embed".into(), "ok".into(), 0, true),
            ("embed".into(), "ok".into(), 5, false),
            ("embed".into(), "ok".into(), 5, false),
            ("embed".into(), "ok".into(), 0, true),
            ("nope".into(), "error".into(), 0, false),
        ]
    );
    assert!(
        records.iter().all(|r| r.bodies.is_null()),
        "embeddings keep no bodies"
    );
}

//! Unit tests of the router's parts: continuation trimming, backoff, cache keys, metadata,
//! cooldown accounting, breakers and the providers' own figures.

use serde_json::{json, Value};

use crate::breaker::Breaker;
use crate::cache::cache_key;
use crate::config::{self, TargetConfig};
use crate::failover::Repeat;
use crate::route::backoff;
use crate::*;

#[test]
fn a_restart_that_repeats_the_earlier_text_is_trimmed() {
    let mut r = Repeat::new("Hello, wor");
    assert_eq!(r.push("Hel"), "");
    assert_eq!(r.push("lo, wo"), "");
    assert_eq!(r.push("rld!"), "ld!");
    assert_eq!(r.push(" Bye"), " Bye");
    assert_eq!(r.finish(), "");
}

#[test]
fn a_continuation_passes_through() {
    let mut r = Repeat::new("Hello, wor");
    assert_eq!(r.push("ld"), "ld");
    assert_eq!(r.push("!"), "!");
    // A continuation that starts like the earlier text is held only while it could be a
    // repeat, and released whole.
    let mut r = Repeat::new("abc");
    assert_eq!(r.push("ab"), "");
    assert_eq!(r.push("x"), "abx");
    let mut r = Repeat::new("abcdef");
    assert_eq!(r.push("ab"), "");
    assert_eq!(r.finish(), "ab");
}

#[test]
fn backoff_grows_as_configured_and_stays_under_the_cap() {
    let mut target: TargetConfig = serde_json::from_value(json!({
        "provider": "p", "model": "m",
        "retry": { "backoff": "exponential", "base_ms": 100, "max_ms": 350, "jitter": false }
    }))
    .unwrap();
    let ms = |t: &TargetConfig, n| backoff(t, n).as_millis();
    assert_eq!(
        [ms(&target, 1), ms(&target, 2), ms(&target, 3)],
        [100, 200, 350]
    );
    target.retry.backoff = config::BackoffKind::Linear;
    assert_eq!(
        [ms(&target, 1), ms(&target, 2), ms(&target, 3)],
        [100, 200, 300]
    );
    target.retry.backoff = config::BackoffKind::Constant;
    assert_eq!([ms(&target, 1), ms(&target, 3)], [100, 100]);
    target.retry.jitter = true;
    assert!((0..50).all(|_| ms(&target, 1) <= 100));
}

#[test]
fn cache_keys_ignore_key_order_and_differ_by_content() {
    let a = RouterRequest {
        route: "r".into(),
        messages: vec![crate::chat::ChatMessage::user("hi")],
        extra: serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap(),
        ..Default::default()
    };
    let mut b = a.clone();
    b.extra = serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap();
    assert_eq!(cache_key(&a, None), cache_key(&b, None));
    b.messages = vec![crate::chat::ChatMessage::user("hi!")];
    assert_ne!(cache_key(&a, None), cache_key(&b, None));
    let mut c = a.clone();
    c.route = "other".into();
    assert_ne!(cache_key(&a, None), cache_key(&c, None));
    // Scoped by the caller's key.
    assert_eq!(cache_key(&a, Some("k1")), cache_key(&a, Some("k1")));
    assert_ne!(cache_key(&a, Some("k1")), cache_key(&a, Some("k2")));
    assert_ne!(cache_key(&a, Some("k1")), cache_key(&a, None));
}

#[test]
fn metadata_is_a_small_flat_object() {
    assert!(parse_metadata(r#"{"team":"ops","n":3,"ok":true}"#).is_ok());
    assert!(parse_metadata("[1]").is_err());
    assert!(parse_metadata(r#"{"nested":{"a":1}}"#).is_err());
    let many: Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!(i))).collect();
    assert!(parse_metadata(&Value::Object(many).to_string()).is_err());
}

#[test]
fn only_health_failures_count_towards_a_cooldown() {
    let status = |code| ProviderError::status(code, None, "x").counts_against_target();
    assert!(status(500) && status(503) && status(429) && status(408));
    assert!(!status(400) && !status(404) && !status(422));
    assert!(!ProviderError::new(FailureKind::Invalid, "x").counts_against_target());
    assert!(ProviderError::new(FailureKind::TtftTimeout, "x").counts_against_target());
    assert!(ProviderError::new(FailureKind::Connect, "x").counts_against_target());
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_trial_frees_the_breaker_for_the_next_call() {
    let breaker = Breaker::default();
    let cooldown = Duration::from_secs(30);
    breaker.failure(1, cooldown);
    tokio::time::advance(Duration::from_secs(31)).await;
    let trial = breaker.admit();
    assert!(trial.is_some(), "the trial is due");
    assert!(breaker.admit().is_none(), "one trial at a time");
    drop(trial); // the caller went away mid-attempt: no success, no failure
    assert!(breaker.admit().is_some(), "the next call gets the trial");
}

#[tokio::test(start_paused = true)]
async fn breakers_open_after_the_threshold_and_let_one_trial_through() {
    let breaker = Breaker::default();
    let cooldown = Duration::from_secs(30);
    breaker.failure(2, cooldown);
    assert!(breaker.allow());
    breaker.failure(2, cooldown);
    assert!(!breaker.allow());
    tokio::time::advance(Duration::from_secs(29)).await;
    assert!(!breaker.allow(), "still cooling down");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(breaker.allow(), "one trial after the cooldown");
    assert!(!breaker.allow(), "only one");
    breaker.failure(2, cooldown);
    assert!(!breaker.allow(), "a failed trial opens it again");
    tokio::time::advance(Duration::from_secs(31)).await;
    assert!(breaker.allow());
    breaker.success();
    assert!(breaker.allow() && breaker.allow());
}

/// Test double: a provider that only reports figures.
struct FiguresProvider(&'static str, f64);

#[async_trait::async_trait]
impl Provider for FiguresProvider {
    fn name(&self) -> &str {
        self.0
    }
    fn system(&self) -> &str {
        "double"
    }
    async fn chat(&self, _call: ProviderCall<'_>) -> Result<ProviderReply, ProviderError> {
        Err(ProviderError::new(FailureKind::Unavailable, "a double"))
    }
    fn metrics(&self) -> Vec<ProviderMetric> {
        ["stead_x_hits_total", "stead_x_bytes"]
            .into_iter()
            .map(|name| ProviderMetric {
                name,
                help: "A figure",
                counter: name.ends_with("_total"),
                model: "m\"1".into(),
                value: self.1,
            })
            .collect()
    }
}

/// Providers' own figures reach `/metrics` once per family, labelled by provider and model
/// (escaped), and unavailable providers report nothing.
#[tokio::test]
async fn providers_report_their_own_figures_once_per_family() {
    let mut providers = Providers::new();
    for (name, value) in [("b", 2.0), ("a", 1.5)] {
        let provider = Arc::new(FiguresProvider(name, value)) as Arc<dyn Provider>;
        providers.insert(name.to_string(), Some(provider));
    }
    providers.insert("gone".into(), None);
    let router = Router::new(&[], GatewayConfig::default(), &providers, None).unwrap();
    let text = router.render_metrics();
    let lines: Vec<&str> = text.lines().collect();
    let expected = [
        "# HELP stead_x_bytes A figure",
        "# TYPE stead_x_bytes gauge",
        "stead_x_bytes{provider=\"a\",model=\"m\\\"1\"} 1.5",
        "stead_x_bytes{provider=\"b\",model=\"m\\\"1\"} 2",
        "# HELP stead_x_hits_total A figure",
        "# TYPE stead_x_hits_total counter",
        "stead_x_hits_total{provider=\"a\",model=\"m\\\"1\"} 1.5",
        "stead_x_hits_total{provider=\"b\",model=\"m\\\"1\"} 2",
    ];
    assert_eq!(lines, expected, "{text}");
}

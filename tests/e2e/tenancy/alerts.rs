//! Budget alerts through the real binary (docs/tenancy.md, "Budget alerts"): with `[budget_alerts]`
//! at half a budget, a key's calls post one alert to the webhook when their spending crosses
//! it — not before, and not again in the same window.

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;
use stead_testkit::webhook::Webhook;

use super::Project;

/// The alerts the webhook received for `budget`.
fn alerts(webhook: &Webhook, budget: &str) -> Vec<Value> {
    webhook
        .bodies()
        .into_iter()
        .filter(|b| b["type"] == "budget.alert" && b["budget"] == budget)
        .collect()
}

pub(super) async fn a_budget_alerts_once_at_its_share(
    server: &Stead,
    a: &Project,
    webhook: &Webhook,
) {
    // $0.01; each call below costs $0.001 (one token at $1,000 per million).
    let (status, created) = server
        .call(
            "POST",
            &format!("/v1/projects/{}/keys", a.name),
            Some(json!({"name": "alerted", "role": "inference", "budget_usd": 0.01})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let secret = created["key"].as_str().unwrap().to_string();
    let chat =
        json!({"model": "alt", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]});
    for i in 1..=7 {
        let (status, body) = server
            .call_as(
                "POST",
                "/v1/chat/completions",
                Some(chat.clone()),
                Some(&secret),
            )
            .await;
        assert_eq!(status, 200, "call {i}: {body}");
        // Settling, and the alert, follow the answer: give them time before looking.
        let mut sent = alerts(webhook, "key `alerted`");
        for _ in 0..(if i >= 5 { 100 } else { 10 }) {
            if !sent.is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            sent = alerts(webhook, "key `alerted`");
        }
        if i < 5 {
            assert!(sent.is_empty(), "alerted at call {i}: {sent:?}");
            continue;
        }
        assert_eq!(sent.len(), 1, "call {i}: {sent:?}");
        let alert = &sent[0];
        assert_eq!(
            (alert["usd"].as_f64(), alert["share"].as_f64()),
            (Some(0.01), Some(0.5))
        );
        assert!(
            (alert["spent"].as_f64().unwrap() - 0.005).abs() < 1e-9,
            "{alert}"
        );
        assert!(alert["ledger_key"]
            .as_str()
            .unwrap()
            .starts_with("budget:key:"));
    }
}

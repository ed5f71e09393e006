//! A virtual key's own requests per minute (docs/tenancy.md, "Rate limits"): a key made with
//! `rpm: 2` shows it, makes two gateway calls and has the third refused with 429
//! `rate_limited` naming the key and a `Retry-After`, while another key of its project is not
//! held back; `rpm: 0` is refused when the key is made.

use serde_json::json;
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;

use super::Project;

pub(super) async fn a_keys_own_rate_limit_holds(server: &Stead, a: &Project) {
    let (status, created) = server
        .call(
            "POST",
            &format!("/v1/projects/{}/keys", a.name),
            Some(json!({"name": "slow", "role": "inference", "routes": ["alt"], "rpm": 2})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        (&created["rpm"], &created["tpm"]),
        (&json!(2), &json!(null))
    );
    let secret = created["key"].as_str().unwrap().to_string();
    let chat =
        json!({"model": "alt", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});
    for _ in 0..2 {
        let (status, body) = server
            .call_as(
                "POST",
                "/v1/chat/completions",
                Some(chat.clone()),
                Some(&secret),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.base))
        .bearer_auth(&secret)
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert!(
        response.headers().contains_key("retry-after"),
        "{:?}",
        response.headers()
    );
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    let id = created["id"].as_str().unwrap();
    assert!(message.contains(&format!("key:{id}")), "{message}");
    // The project's other keys are not held back by it.
    let (status, body) = server
        .call_as(
            "POST",
            "/v1/chat/completions",
            Some(chat),
            Some(&a.inference.secret),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let (status, refused) = server
        .call(
            "POST",
            &format!("/v1/projects/{}/keys", a.name),
            Some(json!({"name": "never", "role": "member", "rpm": 0})),
        )
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (422, Some("invalid_request"))
    );
}

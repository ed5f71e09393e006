//! The built-in tools against real things: the SQLite store for memory, a real HTTP server for
//! webhooks (a test double of the user's endpoint that counts calls by idempotency key).

use std::time::Duration;

use serde_json::json;
use stead_actors::tools::{
    calculate, CalculatorTool, ClockTool, MemoryTool, Tool, ToolContext, ToolInfo, WebhookTool,
};
use stead_actors::ApprovalPolicy;
use stead_persistence::{DatabaseUrl, NewSession, StoreOptions};
use stead_testkit::webhook::{Webhook, HANG};
use uuid::Uuid;

fn info(name: &str, idempotent: bool) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        description: String::new(),
        approval: ApprovalPolicy::Never,
        idempotent,
    }
}

fn context(session_id: Uuid) -> ToolContext {
    ToolContext::new(session_id, "t1")
}

#[test]
fn calculator_evaluates_and_refuses() {
    assert_eq!(calculate("2 + 3 * (4 - 1)^2").unwrap(), 29.0);
    assert_eq!(calculate("-2^2").unwrap(), -4.0);
    assert_eq!(calculate("2^3^2").unwrap(), 512.0);
    assert_eq!(calculate("2^-1").unwrap(), 0.5);
    assert_eq!(calculate("10 % 4 / 2").unwrap(), 1.0);
    assert_eq!(calculate("1.5e3 + .5").unwrap(), 1500.5);
    for bad in ["1 / 0", "2 +", "(1", "abc", "1 2"] {
        assert!(calculate(bad).is_err(), "{bad}");
    }
}

#[tokio::test]
async fn calculator_and_clock_answer_json() {
    let id = Uuid::now_v7();
    let calc = CalculatorTool {
        info: info("calculator", true),
    };
    let out = calc
        .execute(json!({"expression": "6*7"}), &context(id))
        .await
        .unwrap();
    // A whole number comes back as one; a fraction as a float.
    assert_eq!(out, json!({"expression": "6*7", "value": 42}));
    let out = calc
        .execute(json!({"expression": "7/2"}), &context(id))
        .await
        .unwrap();
    assert_eq!(out, json!({"expression": "7/2", "value": 3.5}));
    assert!(calc.execute(json!({}), &context(id)).await.is_err());
    let clock = ClockTool {
        info: info("clock", true),
    };
    let out = clock.execute(json!({}), &context(id)).await.unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(out["utc"].as_str().unwrap()).is_ok());
}

#[tokio::test]
async fn memory_uses_the_sessions_durable_storage() {
    let dir = tempfile::tempdir().unwrap();
    let store = stead_persistence::open(StoreOptions::new(DatabaseUrl::Sqlite(
        dir.path().join("s.db"),
    )))
    .await
    .unwrap();
    let id = store
        .create_session(NewSession::for_agent("demo"))
        .await
        .unwrap()
        .id;
    let memory = MemoryTool::all_ops(info("memory", true), store.clone());
    let ctx = context(id);
    memory
        .execute(json!({"op": "set", "key": "note/a", "value": "milk"}), &ctx)
        .await
        .unwrap();
    memory
        .execute(json!({"op": "set", "key": "note/b", "value": "eggs"}), &ctx)
        .await
        .unwrap();
    assert_eq!(
        memory
            .execute(json!({"op": "get", "key": "note/a"}), &ctx)
            .await
            .unwrap(),
        json!({"key": "note/a", "value": "milk"})
    );
    assert_eq!(
        memory
            .execute(json!({"op": "list", "key": "note/"}), &ctx)
            .await
            .unwrap(),
        json!({"keys": ["note/a", "note/b"]})
    );
    assert_eq!(
        memory
            .execute(json!({"op": "delete", "key": "note/a"}), &ctx)
            .await
            .unwrap(),
        json!({"key": "note/a", "deleted": true})
    );
    assert_eq!(store.kv_get(id, "note/a").await.unwrap(), None);
    assert!(memory.execute(json!({"op": "get"}), &ctx).await.is_err());
    assert!(memory
        .execute(json!({"op": "explode"}), &ctx)
        .await
        .is_err());

    // A tool limited to some operations offers only those and refuses the others.
    let remember = MemoryTool {
        ops: vec!["get".into(), "set".into()],
        ..MemoryTool::all_ops(info("remember", true), store.clone())
    };
    assert_eq!(
        remember.parameters()["properties"]["op"]["enum"],
        json!(["get", "set"])
    );
    let refused = remember
        .execute(json!({"op": "delete", "key": "note/b"}), &ctx)
        .await
        .unwrap_err();
    assert!(refused.0.contains("offers: get, set"), "{refused}");
    assert!(
        store.kv_get(id, "note/b").await.unwrap().is_some(),
        "not deleted"
    );
    store.shutdown().await;
}

/// The endpoint double answering `statuses` in order (then 200), and the URL of its
/// `/tools/delete`.
async fn serve(statuses: Vec<u16>) -> (String, Webhook) {
    let hook = Webhook::scripted(statuses).await;
    (hook.url("/tools/delete"), hook)
}

fn webhook(url: &str, idempotent: bool) -> WebhookTool {
    WebhookTool {
        info: info("delete_records", idempotent),
        url: url.into(),
        headers: Default::default(),
        parameters: json!({"type": "object"}),
        timeout: Duration::from_millis(500),
        attempts: 3,
        client: stead_actors::tools::webhook_client().unwrap(),
    }
}

#[tokio::test]
async fn webhook_sends_the_spec_body_and_key() {
    let (url, e) = serve(vec![]).await;
    let id = Uuid::now_v7();
    let out = webhook(&url, true)
        .execute(json!({"table": "users"}), &context(id))
        .await
        .unwrap();
    assert_eq!(out, json!({"deleted": "users"}));
    let seen = e.deliveries();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].key, format!("{id}:t1"));
    assert_eq!(
        seen[0].body,
        json!({"session_id": id, "call_id": "t1", "tool": "delete_records", "arguments": {"table": "users"}})
    );
}

#[tokio::test]
async fn idempotent_webhooks_retry_server_errors_with_the_same_key() {
    let (url, e) = serve(vec![500, 503]).await;
    let id = Uuid::now_v7();
    webhook(&url, true)
        .execute(json!({"table": "t"}), &context(id))
        .await
        .unwrap();
    let keys = e.keys();
    assert_eq!(keys, vec![format!("{id}:t1"); 3]);
}

#[tokio::test]
async fn non_idempotent_webhooks_are_tried_once() {
    let (url, e) = serve(vec![500]).await;
    let err = webhook(&url, false)
        .execute(json!({}), &context(Uuid::now_v7()))
        .await
        .unwrap_err();
    assert!(err.0.contains("500"), "{err}");
    assert_eq!(e.deliveries().len(), 1);
}

#[tokio::test]
async fn client_errors_are_not_retried_and_timeouts_fail() {
    let (url, e) = serve(vec![400]).await;
    assert!(webhook(&url, true)
        .execute(json!({}), &context(Uuid::now_v7()))
        .await
        .is_err());
    assert_eq!(e.deliveries().len(), 1);

    let (url, _) = serve(vec![HANG, HANG, HANG]).await;
    let err = webhook(&url, true)
        .execute(json!({}), &context(Uuid::now_v7()))
        .await
        .unwrap_err();
    assert!(err.0.contains("timed out"), "{err}");
}

/// A webhook's errors never carry its URL: it may hold credentials (user info, a token in the
/// query), and `tool_call_failed` is read by the model and the session's users.
#[tokio::test]
async fn webhook_errors_do_not_leak_the_url() {
    // Port 1 on loopback: nothing listens, the connection is refused.
    let url = "http://alice:s3cret-pass@127.0.0.1:1/hook?token=s3cret-token";
    let err = webhook(url, false)
        .execute(json!({}), &context(Uuid::now_v7()))
        .await
        .unwrap_err();
    assert!(err.0.starts_with("webhook unreachable"), "{err}");
    for secret in ["s3cret-pass", "s3cret-token", "alice"] {
        assert!(!err.0.contains(secret), "{secret} in {err}");
    }
}

/// A webhook that answers with a redirect does not take the body (and the entry's secret
/// headers) to the other host: the call fails with the status (before, the client
/// followed it and re-sent everything).
#[tokio::test]
async fn webhooks_follow_no_redirect() {
    let elsewhere = Webhook::start().await;
    let (url, hook) = serve(vec![]).await;
    hook.redirect_to(&elsewhere.url("/collect"));
    let err = webhook(&url, true)
        .execute(json!({"table": "users"}), &context(Uuid::now_v7()))
        .await
        .unwrap_err();
    assert!(err.0.contains("307"), "{err}");
    assert!(err.0.contains("redirects are not followed"), "{err}");
    assert_eq!(hook.deliveries().len(), 1, "a 3xx is not retried");
    assert!(
        elsewhere.deliveries().is_empty(),
        "nothing reached the other host"
    );
}

/// An answer over the limit fails the call without being buffered whole — declared by its
/// `Content-Length` or streamed without one (a 400 MiB answer took the process to a
/// 2 GiB peak); one under it is the result.
#[tokio::test]
async fn webhook_answers_are_size_limited() {
    use stead_actors::tools::MAX_WEBHOOK_ANSWER;
    for declared in [true, false] {
        let (url, hook) = serve(vec![]).await;
        hook.answer_bytes(MAX_WEBHOOK_ANSWER + 1, declared);
        let err = webhook(&url, false)
            .execute(json!({}), &context(Uuid::now_v7()))
            .await
            .unwrap_err();
        assert!(
            err.0.contains("more than 1024 KiB"),
            "declared {declared}: {err}"
        );
        hook.answer_bytes(MAX_WEBHOOK_ANSWER, declared);
        let out = webhook(&url, false)
            .execute(json!({}), &context(Uuid::now_v7()))
            .await
            .unwrap();
        assert_eq!(out.as_str().map(str::len), Some(MAX_WEBHOOK_ANSWER - 2));
    }
}

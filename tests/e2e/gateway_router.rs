//! The model router through `stead serve`: `/v1/chat/completions` (whole and streamed) over
//! scripted upstream doubles on loopback, its response headers, the cache, bad input, strict
//! budgets over HTTP, the request log (`/v1/gateway/logs`) and its statistics
//! (`/v1/gateway/stats`) read back from SQLite and from PostgreSQL, and a session's model calls
//! logged with its id.

use std::time::Duration;

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::db;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

fn config(a: &Upstream, b: &Upstream) -> String {
    format!(
        r#"
[[providers]]
name = "a"
kind = "openai"
base_url = "{a}"

[[providers]]
name = "b"
kind = "openai"
base_url = "{b}"

[[routes]]
name = "flaky"
targets = [
  {{ provider = "a", model = "m-a", retry = {{ attempts = 3, base_ms = 10, max_ms = 20, jitter = false }} }},
  {{ provider = "b", model = "m-b" }},
]

[gateway.cache]
enabled = true

[gateway.prices."m-a"]
input = 1.0
output = 2.0

[[agents]]
name = "chat"
route = "flaky"
"#,
        a = a.base_url,
        b = b.base_url
    )
}

async fn post(
    server: &Stead,
    body: Value,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.base))
        .json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    headers.get(name).map_or("", |v| v.to_str().unwrap())
}

fn chat(text: &str) -> Value {
    json!({ "model": "flaky", "messages": [{ "role": "user", "content": text }] })
}

/// The log rows matching `query`, once at least `n` are written (the log is batched).
async fn logs(server: &Stead, query: &str, n: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = server
            .call("GET", &format!("/v1/gateway/logs?{query}"), None)
            .await;
        assert_eq!(status, 200, "{body}");
        let rows = body["logs"].as_array().unwrap().clone();
        if rows.len() >= n || std::time::Instant::now() > deadline {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn the_router_story(database_url: Option<&str>) {
    let a = Upstream::start(vec![Reply::status(500)], Reply::text("Alpha answer.")).await;
    let b = Upstream::start(vec![], Reply::text("Beta answer.")).await;
    let server = Stead::start(&config(&a, &b), database_url);

    // 500 then 200: retried on the same target; the headers name it and the attempts.
    let (status, headers, body) = post(&server, chat("hello"), &[]).await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "flaky");
    assert_eq!(body["choices"][0]["message"]["content"], "Alpha answer.");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        body["usage"],
        json!({ "prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7 })
    );
    assert_eq!(header(&headers, "x-stead-provider"), "a");
    assert_eq!(header(&headers, "x-stead-model"), "m-a");
    assert_eq!(header(&headers, "x-stead-attempts"), "2");
    assert_eq!(header(&headers, "x-stead-cache"), "miss");
    let first_id = header(&headers, "x-stead-request-id").to_string();

    // The same request again: from the cache; with the bypass header: from upstream.
    let (_, headers, body) = post(&server, chat("hello"), &[]).await;
    assert_eq!(header(&headers, "x-stead-cache"), "hit", "{body}");
    let hit_id = header(&headers, "x-stead-request-id").to_string();
    let (_, headers, _) = post(&server, chat("hello"), &[("x-stead-cache", "bypass")]).await;
    assert_eq!(header(&headers, "x-stead-cache"), "bypass");
    assert_eq!(a.requests().len(), 3);

    // Streamed, with the usage chunk, and custom metadata.
    let mut streamed = chat("stream please");
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({ "include_usage": true });
    let (status, headers, body) = post(
        &server,
        streamed,
        &[("x-stead-metadata", r#"{"team":"ops","n":3}"#)],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), "text/event-stream");
    let data: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Alpha answer.");
    let finish = chunks
        .iter()
        .find(|c| c["choices"][0]["finish_reason"].is_string())
        .unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["stead"]["provider"], "a");
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 2);

    // Bad input: a clear 4xx, nothing called.
    let calls = a.requests().len();
    let (status, _, body) = post(&server, json!({ "model": "flaky" }), &[]).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        "invalid_request"
    );
    let (status, _, body) = post(&server, chat("x"), &[("x-stead-metadata", "[1]")]).await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        "invalid_metadata"
    );
    let mut unknown = chat("x");
    unknown["model"] = json!("no-such-route");
    let (status, _, body) = post(&server, unknown, &[]).await;
    assert_eq!(status, 404);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        "model_not_found"
    );
    assert_eq!(a.requests().len(), calls);

    // A session's model call goes through the same router and is logged with its id.
    let (session, _) = server.create("chat").await;
    let (status, body) = server.say(&session, "hi from a session").await;
    assert_eq!(status, 200, "{body}");
    let rows = logs(&server, &format!("session_id={session}"), 1).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["provider"], "a");
    let journal = server.journal(&session).await;
    let finished = journal
        .iter()
        .find(|e| e["kind"] == "model_call_finished")
        .unwrap();
    assert_eq!(finished["payload"]["provider"], "a");
    assert_eq!(finished["payload"]["model"], "m-a");
    assert!(finished["payload"]["cost"].as_f64().unwrap() > 0.0);

    // The log tells each story, newest first.
    let rows = logs(&server, "route=flaky", 5).await;
    assert_eq!(rows.len(), 5, "{rows:#?}");
    let by_id = |id: &str| rows.iter().find(|r| r["id"] == id).unwrap().clone();
    let first = by_id(&first_id);
    assert_eq!(first["status"], "ok");
    assert_eq!(first["cache_hit"], false);
    let story: Vec<(Value, Value)> = first["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["outcome"].clone(),
                a.get("status").cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    assert_eq!(
        story,
        vec![(json!("error"), json!(500)), (json!("ok"), Value::Null)]
    );
    assert_eq!(
        (first["tokens_in"].clone(), first["tokens_out"].clone()),
        (json!(5), json!(2))
    );
    assert!(first["cost"].as_f64().unwrap() > 0.0);
    let hit = by_id(&hit_id);
    assert_eq!(
        (hit["cache_hit"].clone(), hit["cost"].clone()),
        (json!(true), json!(0.0))
    );
    assert_eq!(hit["api_key"], "local");
    let newest_first: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let mut sorted = newest_first.clone();
    sorted.sort_by(|x, y| y.cmp(x));
    assert_eq!(newest_first, sorted);
    // Pages follow the cursor without repeats.
    let (_, page) = server
        .call("GET", "/v1/gateway/logs?route=flaky&limit=2", None)
        .await;
    let cursor = page["next_cursor"].as_str().unwrap().to_string();
    let (_, next) = server
        .call(
            "GET",
            &format!("/v1/gateway/logs?route=flaky&limit=2&cursor={cursor}"),
            None,
        )
        .await;
    assert_eq!(next["logs"][0]["id"], rows[2]["id"]);
    let (_, hits) = server.call("GET", "/v1/gateway/logs?cache=hit", None).await;
    assert_eq!(hits["logs"].as_array().unwrap().len(), 1);

    // Statistics: by route, and by a metadata key.
    let (status, stats) = server
        .call("GET", "/v1/gateway/stats?group_by=route", None)
        .await;
    assert_eq!(status, 200, "{stats}");
    let group = &stats["groups"][0];
    assert_eq!(group["key"], "flaky");
    assert_eq!(group["count"], 5);
    assert_eq!(group["cache_hits"], 1);
    assert_eq!(group["tokens_out"], 8);
    assert!(group["latency_p99_ms"].as_f64().unwrap() >= group["latency_p50_ms"].as_f64().unwrap());
    let (_, stats) = server
        .call("GET", "/v1/gateway/stats?group_by=metadata.team", None)
        .await;
    let ops = stats["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["key"] == "ops")
        .unwrap();
    assert_eq!(ops["count"], 1);
    let (status, body) = server
        .call("GET", "/v1/gateway/stats?group_by=latency", None)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );
    let (status, body) = server
        .call("GET", "/v1/gateway/logs?cursor=not-a-cursor", None)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );
    let (status, body) = server
        .call("GET", "/v1/gateway/logs?metadata.a'b=1", None)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );
    let (_, filtered) = server
        .call("GET", "/v1/gateway/logs?metadata.team=ops", None)
        .await;
    assert_eq!(filtered["logs"].as_array().unwrap().len(), 1);

    // The histograms.
    let metrics = server.metrics().await;
    assert!(metrics.contains("stead_gen_ai_client_operation_duration_seconds_count{route=\"flaky\",provider=\"a\",model=\"m-a\",outcome=\"ok\"}"), "{metrics}");
    assert!(metrics.contains("stead_gen_ai_client_token_usage_bucket"));
    assert!(metrics.contains("stead_gen_ai_server_time_to_first_token_seconds_bucket"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_through_the_openai_endpoint_and_its_log_on_sqlite() {
    the_router_story(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_through_the_openai_endpoint_and_its_log_on_postgres() {
    let scratch = db::scratch_postgres("stead_router").await;
    the_router_story(Some(scratch.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_requests_against_a_budget_for_ten_get_ten_answers_and_429s() {
    let up = Upstream::start(
        vec![],
        Reply::Text {
            text: "ten".into(),
            delay: Duration::from_millis(300),
            chunk_delay: Duration::ZERO,
            completion_tokens: 10,
        },
    )
    .await;
    let config = up.config(
        "metered",
        r#"model = "priced", max_tokens = 10"#,
        r#"[gateway.limits]
budget_usd = 0.1
budget_window_secs = 3600

[gateway.prices.priced]
input = 0.0
output = 1000.0

[[agents]]
name = "metered"
route = "metered"
"#,
    );
    let server = Stead::start(&config, None);
    let requests = (0..50).map(|i| {
        let base = server.base.clone();
        tokio::spawn(async move {
            let response = reqwest::Client::new()
                .post(format!("{base}/v1/chat/completions"))
                .json(&json!({ "model": "metered", "messages": [{ "role": "user", "content": format!("n{i}") }] }))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let retry_after = response.headers().get("retry-after").is_some();
            let body: Value = response.json().await.unwrap();
            (status, retry_after, body)
        })
    });
    let results: Vec<(u16, bool, Value)> = futures_util::future::join_all(requests)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let served = results.iter().filter(|(s, _, _)| *s == 200).count();
    assert_eq!(served, 10);
    for (status, retry_after, body) in results.iter().filter(|(s, _, _)| *s != 200) {
        assert_eq!(*status, 429, "{body}");
        assert!(retry_after);
        assert_eq!(body["error"]["code"], "budget_exceeded");
    }
    assert_eq!(up.requests().len(), 10);
}

/// A session's model calls are charged to the API key that created it: they count against the
/// key's limits like its own `/v1/chat/completions` calls, a refusal fails the call in the
/// journal with its code (the session stays usable), and every row carries the session's
/// metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_model_calls_are_charged_to_the_key_that_created_it() {
    use sha2::Digest;
    let key = "operator-key-0123456789";
    let fingerprint: String = sha2::Sha256::digest(key.as_bytes())[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let up = Upstream::start(vec![], Reply::text("Fine.")).await;
    let config = up.config(
        "metered",
        r#"model = "m""#,
        &format!(
            r#"[server]
api_keys = ["{key}"]

[gateway.limits]
requests_per_min = 3

[[agents]]
name = "metered"
route = "metered"
"#
        ),
    );
    let mut server = Stead::start(&config, None);
    server.api_key = Some(key.into());
    let (status, created) = server
        .call(
            "POST",
            "/v1/sessions",
            Some(json!({ "agent": "metered", "metadata": { "customer": "acme", "plan": { "tier": 2 } } })),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let journal = server.journal(&id).await;
    assert_eq!(
        journal[0]["payload"],
        json!({ "agent": "metered", "principal": fingerprint })
    );
    // Two turns fit the key's three requests a minute…
    for text in ["one", "two"] {
        let (status, body) = server.say(&id, text).await;
        assert_eq!(status, 200, "{body}");
    }
    // …and the key's own call takes the third.
    let (status, _, body) = post(
        &server,
        json!({ "model": "metered", "messages": [{ "role": "user", "content": "direct" }] }),
        &[("authorization", &format!("Bearer {key}"))],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The session's next call is over the key's limit: it fails in the journal, with the code.
    let (status, body) = server.say(&id, "three").await;
    assert_eq!(status, 200, "{body}");
    let journal = server.journal(&id).await;
    let failed = journal
        .iter()
        .find(|e| e["kind"] == "model_call_failed")
        .expect("a failed model call");
    assert!(
        failed["payload"]["error"]
            .as_str()
            .unwrap()
            .starts_with("rate_limited: "),
        "{failed}"
    );
    assert_eq!(
        journal.last().unwrap()["payload"],
        json!({ "reason": "model_failed" })
    );
    let session = server.wait_for_status(&id, "idle").await;
    assert_eq!(session["status"], "idle");
    assert_eq!(
        up.requests().len(),
        3,
        "the refused call never reached upstream"
    );

    // Every row of the session: charged to the key, with the session's flat metadata.
    let rows = logs(&server, &format!("session_id={id}"), 3).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    for row in &rows {
        assert_eq!(row["api_key"], fingerprint.as_str(), "{row}");
        assert_eq!(row["metadata"], json!({ "customer": "acme" }), "{row}");
    }
    let statuses: Vec<&str> = rows.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == "rate_limited").count(),
        1,
        "{statuses:?}"
    );
}

/// An upstream's own error text stays in the request log; the
/// session's `model_call_failed` (read by its token holder and by the model) names the
/// provider and the status only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_error_text_reaches_the_log_but_not_the_journal() {
    let a = Upstream::start(vec![], Reply::status(401)).await;
    let b = Upstream::start(vec![], Reply::status(403)).await;
    let server = Stead::start(&config(&a, &b), None);
    let (id, _) = server.create("chat").await;
    let (status, body) = server.say(&id, "hello").await;
    assert_eq!(status, 200, "{body}");
    let journal = server.journal(&id).await;
    let failed = journal
        .iter()
        .find(|e| e["kind"] == "model_call_failed")
        .expect("a failed model call");
    let error = failed["payload"]["error"].as_str().unwrap();
    assert!(!error.contains("scripted"), "{error}");
    assert!(error.contains("`b` answered HTTP 403"), "{error}");
    let rows = logs(&server, &format!("session_id={id}"), 1).await;
    let attempts = rows[0]["attempts"].as_array().unwrap();
    assert!(
        attempts
            .iter()
            .any(|a| a["error"].as_str().unwrap_or("").contains("scripted 403")),
        "{rows:?}"
    );
}

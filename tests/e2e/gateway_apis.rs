//! Anthropic's `POST /v1/messages` and OpenAI's `POST /v1/responses` over a route to the
//! upstream double, on a keyed server: the exact streamed event sequences, tool calls in each
//! API's shape, who may call (an operator key as `x-api-key`; a session token is refused in
//! Anthropic's envelope), a route's request limit refusing the third call with `Retry-After`
//! in each API's envelope, and one request-log record per answered call. (The official
//! clients against the real model: `tests/local_model/vendor_clients.rs`.)

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

const KEY: &str = "sk-gateway-apis-0123456789";

/// The server-sent events of a body: `(event name, data)` in order.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event:") {
                    name = n.trim().to_string();
                } else if let Some(d) = line.strip_prefix("data:") {
                    data = serde_json::from_str(d.trim()).unwrap();
                }
            }
            (name, data)
        })
        .collect()
}

async fn post(
    base: &str,
    path: &str,
    key: &str,
    body: Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let answer = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("x-api-key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let headers = answer.headers().clone();
    (status, headers, answer.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_and_responses_answer_stream_call_tools_and_are_limited_and_logged() {
    let up = Upstream::start(
        vec![
            Reply::text("Hello there friend"),
            Reply::text("Streamed words here"),
            Reply::tool("clock", json!({ "tz": "UTC" })),
            Reply::text("A response text"),
            Reply::text("Streamed response text"),
            Reply::tool("clock", json!({ "tz": "UTC" })),
        ],
        Reply::text("unused"),
    )
    .await;
    let config = up.config(
        "default",
        r#"model = "double""#,
        &format!(
            "[[routes]]\nname = \"limited\"\nrequests_per_min = 2\ntargets = [{{ provider = \"up\", model = \"double\" }}]\n\n\
             [[agents]]\nname = \"ops\"\nroute = \"default\"\nsystem_prompt = \"Help.\"\n\n\
             [server]\napi_keys = [\"{KEY}\"]\n"
        ),
    );
    let server = Stead::start(&config, None);
    let base = server.base.as_str();
    let clock =
        json!({ "name": "clock", "description": "the time", "input_schema": { "type": "object" } });
    let ask = |stream: bool| {
        json!({ "model": "default", "max_tokens": 32, "stream": stream,
                "system": "Be brief.", "messages": [{ "role": "user", "content": "Hi" }] })
    };

    // Anthropic, whole.
    let (status, headers, body) = post(base, "/v1/messages", KEY, ask(false)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-stead-provider"], "up");
    let message: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        message["content"],
        json!([{ "type": "text", "text": "Hello there friend" }])
    );
    assert_eq!(
        (
            message["stop_reason"].clone(),
            message["usage"]["output_tokens"].clone()
        ),
        (json!("end_turn"), json!(3))
    );
    assert_eq!(
        up.requests()[0]["messages"][0],
        json!({ "role": "system", "content": "Be brief." })
    );

    // Anthropic, streamed: the exact event sequence, the text once.
    let (status, headers, body) = post(base, "/v1/messages", KEY, ask(true)).await;
    assert_eq!(status, 200, "{body}");
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let streamed = events(&body);
    let names: Vec<&str> = streamed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[names.len() - 4..],
        [
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(
        &names[..3],
        [
            "message_start",
            "content_block_start",
            "content_block_delta"
        ]
    );
    let text: String = streamed
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, "Streamed words here");
    for (name, data) in &streamed {
        assert_eq!(data["type"], json!(name), "each event's data names it");
    }
    assert_eq!(
        streamed[streamed.len() - 2].1["delta"]["stop_reason"],
        "end_turn"
    );

    // Anthropic, a tool call.
    let mut tools = ask(false);
    tools["tools"] = json!([clock]);
    tools["tool_choice"] = json!({ "type": "tool", "name": "clock" });
    let (status, _, body) = post(base, "/v1/messages", KEY, tools).await;
    assert_eq!(status, 200, "{body}");
    let called: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(called["stop_reason"], "tool_use");
    assert_eq!(called["content"][0]["type"], "tool_use");
    assert_eq!(
        (
            called["content"][0]["name"].clone(),
            called["content"][0]["input"].clone()
        ),
        (json!("clock"), json!({ "tz": "UTC" }))
    );
    assert_eq!(
        up.requests()[2]["tool_choice"],
        json!({ "type": "function", "function": { "name": "clock" } })
    );

    // Responses, whole and streamed (sequence numbers in order), and a function call.
    let respond = |stream: bool| json!({ "model": "default", "input": "Hi", "instructions": "Be brief.", "stream": stream });
    let (status, _, body) = post(base, "/v1/responses", KEY, respond(false)).await;
    assert_eq!(status, 200, "{body}");
    let response: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            response["object"].clone(),
            response["status"].clone(),
            response["store"].clone()
        ),
        (json!("response"), json!("completed"), json!(false))
    );
    assert_eq!(
        response["output"][0]["content"][0]["text"],
        "A response text"
    );
    let (status, _, body) = post(base, "/v1/responses", KEY, respond(true)).await;
    assert_eq!(status, 200, "{body}");
    let streamed = events(&body);
    let names: Vec<&str> = streamed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ]
    );
    assert_eq!(names.last(), Some(&"response.completed"));
    let numbers: Vec<u64> = streamed
        .iter()
        .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (0..streamed.len() as u64).collect::<Vec<_>>());
    let text: String = streamed
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, "Streamed response text");
    assert_eq!(
        streamed.last().unwrap().1["response"]["output"][0]["content"][0]["text"],
        json!(text)
    );
    let mut call = respond(false);
    call["tools"] =
        json!([{ "type": "function", "name": "clock", "parameters": { "type": "object" } }]);
    call["tool_choice"] = json!("required");
    let (status, _, body) = post(base, "/v1/responses", KEY, call).await;
    assert_eq!(status, 200, "{body}");
    let called: Value = serde_json::from_str(&body).unwrap();
    let item = &called["output"][0];
    assert_eq!(
        (item["type"].clone(), item["name"].clone()),
        (json!("function_call"), json!("clock"))
    );
    assert_eq!(
        serde_json::from_str::<Value>(item["arguments"].as_str().unwrap()).unwrap(),
        json!({ "tz": "UTC" })
    );

    // A session token is not an operator: refused in Anthropic's envelope.
    let (_, session) = server
        .call_as(
            "POST",
            "/v1/sessions",
            Some(json!({ "agent": "ops" })),
            Some(KEY),
        )
        .await;
    let token = session["token"].as_str().unwrap();
    let (status, _, body) = post(base, "/v1/messages", token, ask(false)).await;
    assert_eq!(status, 403, "{body}");
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (refusal["type"].clone(), refusal["error"]["type"].clone()),
        (json!("error"), json!("permission_error"))
    );

    // The route's limit (2 a minute): the third call is refused with Retry-After, in each
    // API's envelope, and reaches no upstream.
    let upstream_calls = up.requests().len();
    let mut limited = ask(false);
    limited["model"] = json!("limited");
    for _ in 0..2 {
        assert_eq!(
            post(base, "/v1/messages", KEY, limited.clone()).await.0,
            200
        );
    }
    let (status, headers, body) = post(base, "/v1/messages", KEY, limited).await;
    assert_eq!(status, 429, "{body}");
    assert!(headers.contains_key("retry-after"));
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            refusal["error"]["type"].clone(),
            refusal["error"]["code"].clone()
        ),
        (json!("rate_limit_error"), json!("rate_limited"))
    );
    let (status, _, body) = post(
        base,
        "/v1/responses",
        KEY,
        json!({ "model": "limited", "input": "Hi" }),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        "rate_limited"
    );
    assert_eq!(up.requests().len(), upstream_calls + 2);

    // One log record per answered call (8), on the route it named.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, logs) = server
            .call_as(
                "GET",
                "/v1/gateway/logs?limit=100&status=ok",
                None,
                Some(KEY),
            )
            .await;
        let ok = logs["logs"].as_array().unwrap().len();
        if ok == 8 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{ok} ok records: {logs}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

//! OpenTelemetry: `stead serve` with `OTEL_EXPORTER_OTLP_ENDPOINT` set exports its spans over
//! OTLP/HTTP (JSON here) to a collector double on loopback: a session turn is an
//! `invoke_agent {agent}` span whose children are the `chat {route}` model calls and the
//! `execute_tool {tool}` call, with the GenAI semantic conventions' attributes.

use std::collections::HashMap;

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};
use stead_testkit::webhook::Webhook;

/// A span's name, ids and attributes (values as their JSON: `stringValue`s as strings,
/// `intValue`s as the decimal strings OTLP JSON sends).
#[derive(Debug, Clone)]
struct Span {
    name: String,
    id: String,
    parent: String,
    trace: String,
    attributes: HashMap<String, Value>,
}

fn spans(bodies: &[Value]) -> Vec<Span> {
    let mut out = Vec::new();
    for body in bodies {
        for resource in body["resourceSpans"].as_array().unwrap() {
            for scope in resource["scopeSpans"].as_array().unwrap() {
                for span in scope["spans"].as_array().unwrap() {
                    let attributes = span["attributes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|a| {
                            let value = a["value"]
                                .as_object()
                                .and_then(|v| v.values().next().cloned())
                                .unwrap_or(Value::Null);
                            (a["key"].as_str().unwrap().to_string(), value)
                        })
                        .collect();
                    out.push(Span {
                        name: span["name"].as_str().unwrap().to_string(),
                        id: span["spanId"].as_str().unwrap().to_string(),
                        parent: span["parentSpanId"].as_str().unwrap_or("").to_string(),
                        trace: span["traceId"].as_str().unwrap().to_string(),
                        attributes,
                    });
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_otlp_collector_with_the_genai_attributes() {
    // The OTLP collector double: it keeps every request body.
    let collector = Webhook::start().await;
    let up = Upstream::start(
        vec![Reply::Tool {
            name: "clock".into(),
            arguments: json!({}),
        }],
        Reply::text("It is noon."),
    )
    .await;
    let config = up.config(
        "assistant",
        r#"model = "m-1""#,
        r#"[[agents]]
name = "ops"
route = "assistant"

[[agents.tools]]
name = "clock"
kind = "clock"
"#,
    );
    let mut server = Stead::start_with_env(
        tempfile::tempdir().unwrap(),
        &config,
        None,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.base.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ],
    );
    let (session, _) = server.create("ops").await;
    let (status, body) = server.say(&session, "What time is it?").await;
    assert_eq!(status, 200, "{body}");
    // A graceful stop exports what is left.
    assert!(server.signal(libc::SIGTERM).success());

    let traces: Vec<Value> = collector
        .deliveries()
        .into_iter()
        .filter(|d| d.path == "/v1/traces")
        .map(|d| d.body)
        .collect();
    let spans = spans(&traces);
    let named =
        |name: &str| -> Vec<Span> { spans.iter().filter(|s| s.name == name).cloned().collect() };
    let turns = named("invoke_agent ops");
    assert_eq!(turns.len(), 1, "{spans:#?}");
    let turn = &turns[0];
    assert_eq!(turn.attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(turn.attributes["gen_ai.agent.name"], "ops");
    assert_eq!(turn.attributes["gen_ai.conversation.id"], session.as_str());

    let chats = named("chat assistant");
    assert_eq!(chats.len(), 2, "a tool call, then the answer: {spans:#?}");
    for chat in &chats {
        assert_eq!(chat.parent, turn.id, "model calls are children of the turn");
        assert_eq!(chat.trace, turn.trace);
        let a = &chat.attributes;
        assert_eq!(a["gen_ai.operation.name"], "chat");
        assert_eq!(a["gen_ai.provider.name"], "openai");
        assert_eq!(a["gen_ai.request.model"], "assistant");
        assert_eq!(a["gen_ai.response.model"], "m-1");
        assert_eq!(a["gen_ai.usage.input_tokens"], "5");
        assert_eq!(a["gen_ai.conversation.id"], session.as_str());
        assert!(a.contains_key("gen_ai.usage.output_tokens"));
    }
    let reasons: Vec<&Value> = chats
        .iter()
        .map(|c| &c.attributes["gen_ai.response.finish_reasons"])
        .collect();
    assert!(reasons.contains(&&json!("[\"tool_calls\"]")), "{reasons:?}");
    assert!(reasons.contains(&&json!("[\"stop\"]")), "{reasons:?}");

    let tools = named("execute_tool clock");
    assert_eq!(tools.len(), 1, "{spans:#?}");
    assert_eq!(tools[0].parent, turn.id);
    assert_eq!(tools[0].attributes["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tools[0].attributes["gen_ai.tool.name"], "clock");
}

//! The wire format both ways, without a server.

use serde_json::json;

use serde_json::Value;

use super::*;
use crate::chat::{ChatMessage, FinishReason, Role, ToolCall, ToolChoice, Usage};
use crate::provider::RouterRequest;

fn event(chunk: Value) -> String {
    format!("data: {chunk}\n\n")
}

fn content(text: &str) -> String {
    event(json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-test-0613",
        "choices": [{ "index": 0, "delta": { "content": text }, "finish_reason": null }],
    }))
}

fn finish_reason(reason: &str) -> String {
    event(json!({
        "model": "gpt-test-0613",
        "choices": [{ "index": 0, "delta": {}, "finish_reason": reason }],
    }))
}

fn tool_fragment(fragment: Value) -> String {
    event(json!({
        "model": "gpt-test-0613",
        "choices": [{
            "index": 0,
            "delta": { "tool_calls": [fragment] },
            "finish_reason": null,
        }],
    }))
}

/// Feeds `body` one byte at a time: every line and event boundary falls between feeds.
fn feed_bytewise(body: &str) -> (Vec<String>, Result<Assembled, FormatError>) {
    let mut stream = StreamAccumulator::default();
    let mut pieces = Vec::new();
    for byte in body.as_bytes() {
        pieces.extend(stream.feed(std::slice::from_ref(byte)).unwrap().text);
    }
    (pieces, stream.finish())
}

#[test]
fn text_deltas_survive_a_chunk_boundary_inside_a_data_line() {
    let body = [
        ": keep-alive\n\n".to_string(),
        event(json!({
            "model": "gpt-test-0613",
            "choices": [{
                "index": 0,
                "delta": { "role": "assistant", "content": "" },
                "finish_reason": null,
            }],
        })),
        content("Hello"),
        content(" wörld"),
        finish_reason("stop"),
        event(json!({
            "model": "gpt-test-0613",
            "choices": [],
            "usage": { "prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14 },
        })),
        "data: [DONE]\n\n".to_string(),
        // Anything after [DONE] is ignored.
        "data: {not json\n\n".to_string(),
    ]
    .concat();
    let split = body.find("Hello").unwrap() + 2;
    let (first, second) = body.as_bytes().split_at(split);

    let mut stream = StreamAccumulator::default();
    assert_eq!(stream.feed(first).unwrap().text, Vec::<String>::new());
    assert!(!stream.has_output());
    assert_eq!(stream.feed(second).unwrap().text, vec!["Hello", " wörld"]);
    assert!(stream.is_done());
    assert_eq!(
        stream.finish().unwrap(),
        Assembled {
            text: "Hello wörld".into(),
            tool_calls: Vec::new(),
            usage: Some(Usage {
                prompt_tokens: 12,
                completion_tokens: 2,
            }),
            model: Some("gpt-test-0613".into()),
            finish_reason: FinishReason::Stop,
            fragments: 2,
        }
    );

    // The same body split at every byte (a multi-byte character included) and with CRLF
    // line endings assembles the same way.
    let (pieces, answer) = feed_bytewise(&body.replace('\n', "\r\n"));
    assert_eq!(pieces, vec!["Hello", " wörld"]);
    assert_eq!(answer.unwrap().text, "Hello wörld");
}

#[test]
fn tool_call_arguments_are_joined_from_their_fragments() {
    let body = [
        tool_fragment(json!({
            "index": 0,
            "id": "call_abc",
            "type": "function",
            "function": { "name": "get_weather", "arguments": "" },
        })),
        tool_fragment(json!({ "index": 0, "function": { "arguments": "{\"ci" } })),
        tool_fragment(json!({ "index": 0, "function": { "arguments": "ty\": \"Pa" } })),
        tool_fragment(json!({ "index": 0, "function": { "arguments": "ris\"}" } })),
        finish_reason("tool_calls"),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let (pieces, answer) = feed_bytewise(&body);
    assert!(pieces.is_empty());
    assert_eq!(
        answer.unwrap(),
        Assembled {
            text: String::new(),
            tool_calls: vec![ToolCall {
                id: "call_abc".into(),
                name: "get_weather".into(),
                arguments: "{\"city\": \"Paris\"}".into(),
            }],
            // No usage chunk: the provider counts one token per fragment.
            usage: None,
            model: Some("gpt-test-0613".into()),
            finish_reason: FinishReason::ToolCalls,
            fragments: 4,
        }
    );
}

#[test]
fn parallel_tool_calls_are_kept_apart_by_index() {
    let body = [
        content("Let me look."),
        tool_fragment(json!({
            "index": 0,
            "id": "call_1",
            "function": { "name": "get_weather", "arguments": "{\"city\":" },
        })),
        tool_fragment(json!({
            "index": 1,
            "id": "call_2",
            "function": { "name": "get_time", "arguments": "" },
        })),
        tool_fragment(json!({ "index": 0, "function": { "arguments": "\"Rome\"}" } })),
        finish_reason("tool_calls"),
    ]
    .concat();
    let mut stream = StreamAccumulator::default();
    assert_eq!(
        stream.feed(body.as_bytes()).unwrap().text,
        vec!["Let me look."]
    );
    // No [DONE], but the answer was finished.
    let answer = stream.finish().unwrap();
    assert_eq!(answer.text, "Let me look.");
    assert_eq!(
        answer
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("call_1", "get_weather", "{\"city\":\"Rome\"}"),
            ("call_2", "get_time", "{}"),
        ]
    );
}

#[test]
fn invalid_tool_arguments_name_the_tool() {
    let body = [
        tool_fragment(json!({
            "index": 0,
            "id": "call_1",
            "function": { "name": "get_weather", "arguments": "{\"city\": \"Par" },
        })),
        finish_reason("length"),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let mut stream = StreamAccumulator::default();
    stream.feed(body.as_bytes()).unwrap();
    let error = stream.finish().unwrap_err();
    assert!(error.message().contains("`get_weather`"), "{error}");
    assert!(error.message().contains("max_tokens"), "{error}");
}

#[test]
fn a_stream_cut_short_is_an_error() {
    let mut stream = StreamAccumulator::default();
    stream.feed(content("Hel").as_bytes()).unwrap();
    let error = stream.finish().unwrap_err();
    assert!(error.message().contains("ended before"), "{error}");
}

#[test]
fn a_last_event_without_its_blank_line_is_still_read() {
    let mut stream = StreamAccumulator::default();
    let body = format!("{}{}", content("Hi"), finish_reason("stop"));
    let body = body.trim_end();
    assert_eq!(stream.feed(body.as_bytes()).unwrap().text, vec!["Hi"]);
    assert!(stream.end().unwrap().text.is_empty());
    assert_eq!(stream.finish().unwrap().text, "Hi");
}

#[test]
fn errors_in_the_stream_end_it() {
    let mut stream = StreamAccumulator::default();
    let body = event(json!({ "error": { "message": "overloaded", "type": "server_error" } }));
    let error = stream.feed(body.as_bytes()).unwrap_err();
    assert!(error.message().contains("overloaded"), "{error}");

    let mut stream = StreamAccumulator::default();
    let error = stream.feed(b"data: {\"choices\": [\n\n").unwrap_err();
    assert!(error.message().contains("unreadable"), "{error}");
}

#[test]
fn a_request_body_parses_with_its_tools_and_options_and_extra_fields_pass_through() {
    let body = json!({
        "model": "default",
        "messages": [
            { "role": "developer", "content": [{ "type": "text", "text": "Be " }, { "type": "text", "text": "brief." }] },
            { "role": "user", "content": "Weather?" },
            { "role": "assistant", "content": null, "tool_calls": [
                { "id": "c1", "type": "function", "function": { "name": "w", "arguments": "{\"city\":\"Oslo\"}" } }
            ] },
            { "role": "tool", "tool_call_id": "c1", "content": "cold" },
        ],
        "tools": [{ "type": "function", "function": { "name": "w", "parameters": { "type": "object" } } }],
        "tool_choice": { "type": "function", "function": { "name": "w" } },
        "max_completion_tokens": 20,
        "temperature": 0.5,
        "stop": "END",
        "stream": true,
        "stream_options": { "include_usage": true },
        "response_format": { "type": "text" },
    });
    let parsed = parse_request(&body).unwrap();
    assert!(parsed.stream && parsed.include_usage);
    let request = &parsed.request;
    assert_eq!(request.route, "default");
    assert_eq!(request.messages[0].role, Role::System);
    assert_eq!(request.messages[0].content, "Be brief.");
    assert_eq!(
        request.messages[2].tool_calls[0].arguments,
        "{\"city\":\"Oslo\"}"
    );
    assert_eq!(request.messages[3].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(request.tool_choice, ToolChoice::Function("w".into()));
    assert_eq!(request.params.max_tokens, Some(20));
    assert_eq!(request.params.stop, vec!["END".to_string()]);
    assert_eq!(request.extra["response_format"], json!({ "type": "text" }));
    // Sent on to a provider: the extra field, the route's model, the tools.
    let sent = provider_body("gpt-x", request, Some(20), "", false);
    assert_eq!(sent["model"], "gpt-x");
    assert_eq!(sent["response_format"], json!({ "type": "text" }));
    assert_eq!(
        sent["tool_choice"],
        json!({ "type": "function", "function": { "name": "w" } })
    );
    assert_eq!(sent["messages"][2]["content"], Value::Null);
}

#[test]
fn bad_request_bodies_name_the_field() {
    for (body, field) in [
        (
            json!({ "messages": [{ "role": "user", "content": "x" }] }),
            "`model`",
        ),
        (json!({ "model": "m", "messages": [] }), "`messages`"),
        (
            json!({ "model": "m", "messages": [{ "role": "robot", "content": "x" }] }),
            "messages[0]",
        ),
        (
            json!({ "model": "m", "messages": [{ "role": "user", "content": "x" }], "temperature": 9 }),
            "`temperature`",
        ),
        (
            json!({ "model": "m", "messages": [{ "role": "user", "content": "x" }], "n": 2 }),
            "`n`",
        ),
        (
            json!({ "model": "m", "messages": [{ "role": "user", "content": "x" }], "tool_choice": "required" }),
            "`tool_choice`",
        ),
        (
            json!({ "model": "m", "messages": [{ "role": "tool", "content": "x" }] }),
            "tool_call_id",
        ),
    ] {
        let error = parse_request(&body).unwrap_err();
        assert!(error.message().contains(field), "{body}: {error}");
    }
}

#[test]
fn a_continuation_ends_with_the_partial_answer() {
    let request = RouterRequest {
        route: "r".into(),
        messages: vec![ChatMessage::user("Count to five.")],
        ..Default::default()
    };
    let body = provider_body("m", &request, None, "one, two,", true);
    assert_eq!(
        body["messages"],
        json!([
            { "role": "user", "content": "Count to five." },
            { "role": "assistant", "content": "one, two," },
        ])
    );
    assert!(body.get("max_tokens").is_none() && body.get("tools").is_none());
}

mod fuzz {
    use proptest::prelude::*;
    use stead_testkit::arbitrary;

    use super::super::parse_request;

    proptest! {
        /// Any JSON body, and bodies shaped like a chat request with values of any kind: parsed,
        /// or refused with a message — never a panic.
        #[test]
        fn any_chat_request_parses_or_is_refused_clearly(
            body in arbitrary::json(),
            shaped in arbitrary::object_with(&[
                "model", "messages", "tools", "tool_choice", "temperature", "top_p",
                "max_tokens", "max_completion_tokens", "stop", "seed", "stream", "stream_options",
                "n",
            ]),
            messages in prop::collection::vec(
                arbitrary::object_with(&["role", "content", "tool_calls", "tool_call_id", "name"]),
                0..4,
            ),
        ) {
            let mut with_messages = shaped.clone();
            with_messages["messages"] = serde_json::Value::Array(messages);
            for input in [body, shaped, with_messages] {
                if let Err(message) = parse_request(&input) {
                    prop_assert!(!message.message().is_empty());
                }
            }
        }
    }
}

#[test]
fn images_are_read_from_parts_and_written_back_as_parts() {
    let body = json!({
        "model": "vision",
        "messages": [{ "role": "user", "content": [
            { "type": "text", "text": "What is this?" },
            { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low" } },
            { "type": "image_url", "image_url": "https://example.com/cat.jpg" },
        ] }],
    });
    let parsed = parse_request(&body).unwrap();
    let message = &parsed.request.messages[0];
    assert_eq!(message.content, "What is this?");
    assert_eq!(message.images.len(), 2);
    assert_eq!(
        message.images[0].data(),
        Some(("image/png", "iVBORw0KGgo="))
    );
    assert_eq!(message.images[0].detail.as_deref(), Some("low"));
    assert_eq!(message.images[1].data(), None);
    let sent = provider_body("m", &parsed.request, None, "", false);
    assert_eq!(
        sent["messages"][0]["content"],
        json!([
            { "type": "text", "text": "What is this?" },
            { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low" } },
            { "type": "image_url", "image_url": { "url": "https://example.com/cat.jpg" } },
        ])
    );
    // A message without images keeps its plain string content.
    let plain = provider_body(
        "m",
        &RouterRequest {
            messages: vec![ChatMessage::user("hi")],
            ..Default::default()
        },
        None,
        "",
        false,
    );
    assert_eq!(plain["messages"][0]["content"], "hi");
}

#[test]
fn images_that_cannot_be_sent_are_refused_naming_the_image() {
    let cases = [
        (
            json!({ "role": "user", "content": [{ "type": "image_url", "image_url": { "url": "data:text/html;base64,PGI+" } }] }),
            "type",
        ),
        (
            json!({ "role": "user", "content": [{ "type": "image_url", "image_url": { "url": "data:image/png;base64,<script>" } }] }),
            "base64",
        ),
        (
            json!({ "role": "user", "content": [{ "type": "image_url", "image_url": { "url": "http://10.0.0.1/x.png" } }] }),
            "https",
        ),
        (
            json!({ "role": "user", "content": [{ "type": "image_url", "image_url": {} }] }),
            "image_url.url",
        ),
        (
            json!({ "role": "assistant", "content": [{ "type": "image_url", "image_url": "https://e.com/a.png" }] }),
            "user messages",
        ),
        (
            json!({ "role": "user", "content": [{ "type": "input_audio" }] }),
            "image_url",
        ),
    ];
    for (message, needle) in cases {
        let body = json!({ "model": "m", "messages": [message] });
        let error = parse_request(&body).unwrap_err().to_string();
        assert!(error.contains(needle), "{error} should name {needle}");
    }
}

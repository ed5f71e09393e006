//! What counts as a reply a person can read (docs/sessions.md, "Replies"): the check every
//! model answer without tool calls passes before it becomes the turn's `assistant_message`,
//! the instruction a repair call carries, and the reply built from the turn's tool results
//! when the model gives nothing usable. All pure: the decisions call them, so replay and the
//! decision check reproduce every outcome without a model.

use serde_json::Value;

/// Model calls a turn may spend on repairing an unusable reply before the reply is built
/// from its tool results instead.
pub const MAX_REPAIRS: u32 = 1;

/// The instruction a repair call ends with (a system message after the transcript; the call
/// offers no tools).
pub const REPAIR_INSTRUCTION: &str = "Now answer the user's request in one or two plain \
sentences, quoting the values in any tool result above. Do not call a tool and do not write \
JSON.";

/// Text that only a model's tool-call or chat-template syntax holds, never a reply.
const MARKERS: [&str; 7] = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
];

/// JSON object keys under which a call written as text names its tool.
const NAME_KEYS: [&str; 4] = ["name", "type", "tool", "function"];

/// Why `text` cannot be the turn's reply, or `None` when it can. `tools` are the names the
/// model was offered; `results` the tool results of the turn so far (`{"error": …}` for a
/// failed call).
pub fn problem(text: &str, tools: &[&str], results: &[&Value]) -> Option<&'static str> {
    let trimmed = text.trim();
    if !trimmed.chars().any(char::is_alphanumeric) {
        return Some("the reply is empty");
    }
    if MARKERS.iter().any(|m| text.contains(m)) {
        return Some("the reply holds tool-call syntax");
    }
    if json_objects(text).any(|object| names_a_call(&object, tools)) {
        return Some("the reply holds a tool call written as text");
    }
    if !results.is_empty()
        && serde_json::from_str::<Value>(trimmed).is_ok_and(|v| v.is_object() || v.is_array())
    {
        return Some("the reply is raw JSON, not an answer");
    }
    None
}

/// The JSON objects that start anywhere in `text` (at most 64 tried).
fn json_objects(text: &str) -> impl Iterator<Item = serde_json::Map<String, Value>> + '_ {
    text.match_indices('{')
        .take(64)
        .filter_map(|(at, _)| {
            serde_json::Deserializer::from_str(&text[at..])
                .into_iter::<Value>()
                .next()
                .and_then(Result::ok)
        })
        .filter_map(|value| match value {
            Value::Object(map) => Some(map),
            _ => None,
        })
}

/// Whether a JSON object reads as a tool call: it names one of the tools under a name-like
/// key (directly or as `{"function": {"name": …}}`), or carries `arguments`.
fn names_a_call(object: &serde_json::Map<String, Value>, tools: &[&str]) -> bool {
    let named = |map: &serde_json::Map<String, Value>| {
        NAME_KEYS.iter().any(|key| {
            map.get(*key)
                .and_then(Value::as_str)
                .is_some_and(|name| tools.contains(&name))
        })
    };
    named(object)
        || object.contains_key("arguments")
        || object
            .get("function")
            .and_then(Value::as_object)
            .is_some_and(named)
}

/// The reply built when the model gave nothing usable: what each tool of the turn returned
/// or why it failed, in plain words; without tool results, an honest apology.
pub fn built(results: &[(&str, &Value)]) -> String {
    if results.is_empty() {
        return "I could not produce an answer to that: the model's replies were empty or held \
                tool-call text. Please try again, or rephrase the request."
            .into();
    }
    let lines: Vec<String> = results
        .iter()
        .map(
            |(tool, result)| match result.get("error").and_then(Value::as_str) {
                Some(error) if result.as_object().is_some_and(|o| o.len() == 1) => {
                    format!("The {tool} tool did not succeed: {}.", sentence(error))
                }
                _ => format!("The {tool} tool returned {}.", plain(result)),
            },
        )
        .collect();
    lines.join(" ")
}

/// A JSON value in words: objects as `key value` pairs, arrays as lists, whole numbers
/// without a decimal point; never braces.
fn plain(value: &Value) -> String {
    match value {
        Value::Null => "nothing".into(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
            _ => n.to_string(),
        },
        Value::String(s) => sentence(s).to_string(),
        Value::Array(items) if items.is_empty() => "none".into(),
        Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(", "),
        Value::Object(map) if map.is_empty() => "nothing".into(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::Object(_) => format!("{k}: ({})", plain(v)),
                _ => format!("{k}: {}", plain(v)),
            })
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// `text` without a trailing full stop (the caller adds one), cut to 300 characters.
fn sentence(text: &str) -> &str {
    let text = text.trim().trim_end_matches('.');
    match text.char_indices().nth(300) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TOOLS: [&str; 4] = ["clock", "remember", "forget", "calculator"];

    #[test]
    fn sentences_pass() {
        for text in [
            "17 * 23 is 391.",
            "I saved your note under the key dentist.",
            "The note was not deleted: the request was rejected.",
            "Here is some code: `fn main() {}`",
            "A set in maths looks like {1, 2, 3}.",
        ] {
            assert_eq!(
                problem(text, &TOOLS, &[&json!({"value": 391})]),
                None,
                "{text}"
            );
        }
    }

    #[test]
    fn empty_and_call_text_are_refused() {
        let result = json!({ "keys": ["wifi"] });
        for (text, why) in [
            ("", "the reply is empty"),
            ("  \n ", "the reply is empty"),
            (">", "the reply is empty"),
            (
                "<tool_call>\n{\"name\": \"clock\"}",
                "the reply holds tool-call syntax",
            ),
            (
                ">{\"name\": \"calculator\", \"arguments\": {\"expression\":\"391.0\"}}",
                "the reply holds a tool call written as text",
            ),
            (
                "{\"type\":\"clock\"}",
                "the reply holds a tool call written as text",
            ),
            (
                "Sure! {\"type\":\"remember\", \"arguments\": {\"op\":\"list\"}}",
                "the reply holds a tool call written as text",
            ),
            (
                "```json\n{\"function\": {\"name\": \"forget\"}}\n```",
                "the reply holds a tool call written as text",
            ),
            (
                "{\"keys\":[\"wifi\"]}",
                "the reply is raw JSON, not an answer",
            ),
        ] {
            assert_eq!(problem(text, &TOOLS, &[&result]), Some(why), "{text:?}");
        }
        // Raw JSON with no tool result in the turn may be what the user asked for.
        assert_eq!(problem("{\"a\": 1}", &TOOLS, &[]), None);
    }

    #[test]
    fn the_built_reply_states_results_and_failures_in_words() {
        let calc = json!({ "expression": "17 * 23", "value": 391.0 });
        let rejected = json!({ "error": "rejected by ada: not now." });
        let text = built(&[("calculator", &calc), ("forget", &rejected)]);
        assert_eq!(
            text,
            "The calculator tool returned expression: 17 * 23; value: 391. \
             The forget tool did not succeed: rejected by ada: not now."
        );
        assert_eq!(problem(&text, &TOOLS, &[&calc]), None);
        assert!(built(&[]).starts_with("I could not produce an answer"));
    }
}

//! Prompt adapters for small local models (docs/inference.md, "Answers after tool results"
//! and "Conversations"), each measured on Qwen2.5-Coder-0.5B and each an option of the pool:
//! in `auto` tool mode, tool results are shown in words and followed by a hint asking for the
//! answer (`tool_result_hint`), earlier turns are folded into the system message as the user's
//! lines (`digest_history`), and small talk is answered without tools (`small_talk`). The journal and the caller's messages are unchanged: only
//! the rendered prompt differs.

use serde_json::Value;

use crate::{ChatMessage, Role};

/// Which adapters are on (both by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adapters {
    /// In `auto` tool mode, a conversation that ends with tool results is rendered with its
    /// JSON results in words ([`result_in_words`]) and [`TOOL_RESULT_HINT`] as a last system
    /// message (small models otherwise answer a result with the call again, with nothing, or
    /// with the JSON).
    pub tool_result_hint: bool,
    /// In `auto` tool mode, the turns before the last user message are folded into the system
    /// message under [`HISTORY_HEADING`] ([`digest_history`]): after one exchange in chat form,
    /// small models stop calling tools.
    pub digest_history: bool,
    /// In `auto` tool mode, a last user message that is only small talk is answered without
    /// tools, and a question about what the assistant can do gets the tools' descriptions in
    /// the system message instead ([`crate::small_talk`]).
    pub small_talk: bool,
}

impl Default for Adapters {
    fn default() -> Self {
        Adapters {
            tool_result_hint: true,
            digest_history: true,
            small_talk: true,
        }
    }
}

/// The prompt of a conversation: rendered with the model's template, adapted for a small
/// model when it may call tools (`auto` with tools); a template that refuses the adapted
/// conversation renders it as given. Also the stop sequences the adapted prompt needs: a
/// prompt that ends with a hint stops at [`HINT_ECHOES`].
pub(crate) fn render(
    template: &crate::template::ChatTemplate,
    messages: &[ChatMessage],
    tools: &[crate::ToolSpec],
    auto: bool,
    adapters: Adapters,
) -> crate::Result<(String, &'static [&'static str])> {
    if auto && !tools.is_empty() {
        if let Some(adapted) = adapt(messages, adapters) {
            if let Ok(prompt) = template.render(&adapted, tools) {
                let hinted = adapted.last().is_some_and(|m| {
                    m.role == Role::System
                        && (m.content == TOOL_RESULT_HINT || m.content == FAILURE_HINT)
                });
                let stops: &[&str] = if hinted { &HINT_ECHOES } else { &[] };
                return Ok((prompt, stops));
            }
        }
    }
    Ok((template.render(messages, tools)?, &[]))
}

/// Where an answer after a hint stops: the 0.5 B model sometimes copies the hint as its answer
/// ("Now answer the user in one plain sentence: …", 1 of 17 turns measured) — what came
/// before the copy is the answer, and an empty one is repaired by the session like any empty
/// reply (docs/sessions.md, "Replies").
pub const HINT_ECHOES: [&str; 2] = ["Now answer the user", "Do not write JSON"];

/// What the model is told after tool results when [`Adapters::tool_result_hint`] is on
/// (measured wording: docs/inference.md, "Tool calling").
pub const TOOL_RESULT_HINT: &str = "Now answer the user's request in one or two plain \
sentences, quoting the values in the tool result above. Do not write JSON.";

/// What the model is told instead of [`TOOL_RESULT_HINT`] when every result it was just given
/// is a failure (`{"error": …}`): with the general hint the 0.5 B model restated the request
/// ("The user asked to forget the note …") instead of saying it was not done.
pub const FAILURE_HINT: &str = "Now answer the user in one plain sentence: say that it was not \
done, and give the reason from the error above. Do not write JSON.";

/// A failed call's result: `{"error": "…"}` and nothing else.
fn failure(content: &str) -> Option<String> {
    let value: Value = serde_json::from_str(content.trim()).ok()?;
    let map = value.as_object().filter(|m| m.len() == 1)?;
    map.get("error")?.as_str().map(str::to_string)
}

/// What opens the earlier turns when [`Adapters::digest_history`] folds them into the
/// system message.
pub const HISTORY_HEADING: &str = "The conversation so far:";

/// `messages` as a small model should be shown them when it may call tools, or `None` when no
/// adapter changes anything.
pub fn adapt(messages: &[ChatMessage], adapters: Adapters) -> Option<Vec<ChatMessage>> {
    let mut adapted = if adapters.digest_history {
        digest_history(messages)
    } else {
        None
    };
    let ends_with_results = adapted
        .as_deref()
        .unwrap_or(messages)
        .last()
        .is_some_and(|m| m.role == Role::Tool);
    if adapters.tool_result_hint && ends_with_results {
        let list = adapted.get_or_insert_with(|| messages.to_vec());
        let results = list
            .iter()
            .rev()
            .take_while(|m| m.role == Role::Tool)
            .count();
        let all_failed = list[list.len() - results..]
            .iter()
            .all(|m| failure(&m.content).is_some());
        for message in list.iter_mut().filter(|m| m.role == Role::Tool) {
            if let Some(error) = failure(&message.content) {
                message.content = format!("Not done. Error: {error}");
            } else if let Some(words) = result_in_words(&message.content) {
                message.content = words;
            }
        }
        list.push(ChatMessage::system(if all_failed {
            FAILURE_HINT
        } else {
            TOOL_RESULT_HINT
        }));
    }
    adapted
}

/// A tool result that is a JSON object or array, in words: `key: value` pairs joined by `; `,
/// lists by `, `, nested objects in parentheses, `yes`/`no`, `(none)` for null and empty lists,
/// whole numbers without a decimal point. `None` for anything else (plain text stays as is).
/// Small models quote `keys: dentist, wifi` where they paraphrase `{"keys":["dentist","wifi"]}`
/// into something else (docs/inference.md, "Tool calling").
pub fn result_in_words(content: &str) -> Option<String> {
    fn words(value: &Value) -> String {
        match value {
            Value::Null => "(none)".into(),
            Value::Bool(true) => "yes".into(),
            Value::Bool(false) => "no".into(),
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => format!("{}", f as i64),
                _ => n.to_string(),
            },
            Value::String(s) => s.clone(),
            Value::Array(items) if items.is_empty() => "(none)".into(),
            Value::Array(items) => items.iter().map(words).collect::<Vec<_>>().join(", "),
            Value::Object(map) if map.is_empty() => "(none)".into(),
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| match v {
                    Value::Object(inner) if !inner.is_empty() => format!("{k}: ({})", words(v)),
                    _ => format!("{k}: {}", words(v)),
                })
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
    let value: Value = serde_json::from_str(content.trim()).ok()?;
    matches!(value, Value::Object(_) | Value::Array(_)).then(|| words(&value))
}

/// The conversation with every message before the last user message folded into the system
/// message (created when there is none) as `User: …` lines under [`HISTORY_HEADING`]. Earlier
/// replies, tool calls and results are left out: measured on Qwen2.5-Coder-0.5B, any earlier
/// assistant text in the prompt is copied as the next answer instead of calling a tool, while the
/// user's own lines keep follow-ups in context (docs/inference.md, "Tool calling"). `None` when
/// there is nothing earlier to fold.
pub(crate) fn digest_history(messages: &[crate::ChatMessage]) -> Option<Vec<crate::ChatMessage>> {
    let last_user = messages.iter().rposition(|m| m.role == Role::User)?;
    let system = messages.first().filter(|m| m.role == Role::System);
    let earlier = &messages[usize::from(system.is_some())..last_user];
    if earlier.is_empty() {
        return None;
    }
    let lines: Vec<String> = earlier
        .iter()
        .filter(|m| m.role == Role::User && !m.content.trim().is_empty())
        .map(|m| format!("User: {}", m.content.trim()))
        .collect();
    let mut content = system.map(|m| m.content.clone()).unwrap_or_default();
    if !lines.is_empty() {
        if !content.trim().is_empty() {
            content.push_str("\n\n");
        }
        content.push_str(HISTORY_HEADING);
        content.push('\n');
        content.push_str(&lines.join("\n"));
    }
    let mut folded = Vec::with_capacity(messages.len() - last_user + 1);
    folded.push(crate::ChatMessage::system(content));
    folded.extend_from_slice(&messages[last_user..]);
    Some(folded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolCall;

    #[test]
    fn earlier_turns_fold_into_the_system_message_as_user_lines() {
        let mut call = ChatMessage::new(Role::Assistant, String::new());
        call.tool_calls = vec![ToolCall {
            id: "t1".into(),
            name: "calculator".into(),
            arguments: "{}".into(),
        }];
        let messages = vec![
            ChatMessage::system("Be brief."),
            ChatMessage::user("What is 17 * 23?"),
            call.clone(),
            ChatMessage::new(Role::Tool, "391"),
            ChatMessage::new(Role::Assistant, "It is 391."),
            ChatMessage::user("And the time?"),
            call,
        ];
        let folded = digest_history(&messages).unwrap();
        assert_eq!(folded.len(), 3);
        assert_eq!(
            folded[0].content,
            "Be brief.\n\nThe conversation so far:\nUser: What is 17 * 23?"
        );
        assert_eq!(folded[1..], messages[5..]);
        // One turn only: nothing to fold.
        assert_eq!(digest_history(&messages[..3]), None);
    }

    #[test]
    fn json_results_read_as_words() {
        for (json, words) in [
            (r#"{"keys":["dentist","wifi"]}"#, "keys: dentist, wifi"),
            (r#"{"keys":[]}"#, "keys: (none)"),
            (
                r#"{"expression":"17 * 23","value":391.0}"#,
                "expression: 17 * 23; value: 391",
            ),
            (
                r#"{"key":"wifi","deleted":true,"old":null}"#,
                "key: wifi; deleted: yes; old: (none)",
            ),
            (r#"{"a":{"b":1.5}}"#, "a: (b: 1.5)"),
            ("[1, 2]", "1, 2"),
        ] {
            assert_eq!(result_in_words(json).as_deref(), Some(words), "{json}");
        }
        assert_eq!(result_in_words("Sunny, 21 degrees."), None);
        assert_eq!(result_in_words("\"quoted\""), None);
        assert_eq!(result_in_words("42"), None);
    }

    #[test]
    fn the_hint_follows_results_in_words_and_nothing_changes_otherwise() {
        let on = Adapters::default();
        let asked = vec![ChatMessage::system("Be brief."), ChatMessage::user("Hi")];
        assert_eq!(adapt(&asked, on), None);
        let mut answered = asked.clone();
        answered.push(ChatMessage::new(Role::Tool, r#"{"value":391.0}"#));
        let adapted = adapt(&answered, on).unwrap();
        assert_eq!(adapted[2].content, "value: 391");
        assert_eq!(adapted[3], ChatMessage::system(TOOL_RESULT_HINT));
        let off = Adapters {
            tool_result_hint: false,
            digest_history: false,
            small_talk: false,
        };
        assert_eq!(adapt(&answered, off), None);
        // A failure reads as one, with the failure hint.
        let mut failed = asked.clone();
        failed.push(ChatMessage::new(
            Role::Tool,
            r#"{"error":"division by zero"}"#,
        ));
        let adapted = adapt(&failed, on).unwrap();
        assert_eq!(adapted[2].content, "Not done. Error: division by zero");
        assert_eq!(adapted[3], ChatMessage::system(FAILURE_HINT));
    }
}

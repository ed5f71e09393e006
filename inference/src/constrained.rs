//! Tool calls that always parse: once a call starts, every token is masked by an llguidance
//! grammar compiled from the tool's JSON schema, so the model can only write a valid call. Also
//! what auto mode needs to tell calls from text: the tokens that open JSON, and the calls a
//! conversation has just had answered.

use std::path::Path;
use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use toktrie_hf_tokenizers::ByteTokenizer;

use crate::{Error, Result, ToolSpec};

/// Longest tool call, in tokens: small models can otherwise loop inside a string.
pub const MAX_CALL_TOKENS: usize = 512;

/// Compiles tool schemas into token masks for one tokenizer (built once per model).
#[derive(Clone)]
pub struct ToolGrammar {
    factory: Arc<ParserFactory>,
}

impl ToolGrammar {
    pub fn new(tokenizer_json: &Path, eos_ids: &[u32], vocab: usize) -> Result<Self> {
        let problem = |e: anyhow::Error| Error::ModelDir {
            dir: tokenizer_json.display().to_string(),
            message: format!("cannot build the tool-call grammar tokenizer: {e}"),
        };
        let mut bytes = ByteTokenizer::from_file(tokenizer_json).map_err(problem)?;
        bytes.set_eos_tokens(eos_ids);
        let env = bytes.into_tok_env(Some(vocab)).map_err(problem)?;
        let factory = ParserFactory::new_simple(&env).map_err(problem)?;
        Ok(ToolGrammar {
            factory: Arc::new(factory),
        })
    }

    /// The schema of one call `{"name": …, "arguments": {…}}` to any of `tools` (or to `only`).
    pub fn call_schema(tools: &[ToolSpec], only: Option<&str>) -> Value {
        let variants: Vec<Value> = tools
            .iter()
            .filter(|t| only.is_none_or(|name| name == t.name))
            .map(|t| {
                json!({
                    "type": "object",
                    "properties": {
                        "name": { "const": t.name },
                        "arguments": closed(&t.parameters),
                    },
                    "required": ["name", "arguments"],
                    "additionalProperties": false,
                })
            })
            .collect();
        let mut schema = match <[Value; 1]>::try_from(variants) {
            Ok([only]) => only,
            Err(variants) => json!({ "anyOf": variants }),
        };
        // Fixed separators: unlimited whitespace is where small models loop.
        schema["x-guidance"] =
            json!({ "whitespace_flexible": false, "key_separator": ": ", "item_separator": ", " });
        schema
    }

    /// A matcher for `schema` (the schema of `tool`, or `*` for a call of any tool), or why it
    /// cannot compile.
    pub fn matcher(&self, schema: Value, max_tokens: usize, tool: &str) -> Result<Matcher> {
        let mut grammar = TopLevelGrammar::from_json_schema(schema);
        grammar.max_tokens = Some(max_tokens.clamp(1, MAX_CALL_TOKENS));
        let matcher = Matcher::new(self.factory.create_parser(grammar));
        match matcher.get_error() {
            Some(message) => Err(Error::InvalidToolSchema {
                tool: tool.to_string(),
                message,
            }),
            None => Ok(matcher),
        }
    }

    /// Checks every tool's schema at admission, naming the first that does not compile.
    pub fn validate(&self, tools: &[ToolSpec]) -> Result<()> {
        for tool in tools {
            if !tool.parameters.is_object() {
                return Err(Error::InvalidToolSchema {
                    tool: tool.name.clone(),
                    message: "parameters must be a JSON-schema object".into(),
                });
            }
            self.matcher(
                Self::call_schema(std::slice::from_ref(tool), None),
                16,
                &tool.name,
            )?;
        }
        Ok(())
    }
}

/// Objects without `additionalProperties` get `false`: otherwise any extra key passes.
fn closed(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(map) = schema.as_object_mut() {
        let is_object = map.get("type").and_then(Value::as_str) == Some("object")
            || map.contains_key("properties");
        if is_object && !map.contains_key("additionalProperties") {
            map.insert("additionalProperties".into(), Value::Bool(false));
        }
        if let Some(Value::Object(properties)) = map.get_mut("properties") {
            for value in properties.values_mut() {
                *value = closed(value);
            }
        }
    }
    schema
}

/// The calls of the assistant message whose results end the conversation (the messages after
/// it are all tool results), as `(name, arguments)`.
pub(crate) fn answered_calls(messages: &[crate::ChatMessage]) -> Vec<(String, serde_json::Value)> {
    let results = messages
        .iter()
        .rev()
        .take_while(|m| m.role == crate::Role::Tool)
        .count();
    if results == 0 {
        return Vec::new();
    }
    let Some(asked) = messages
        .len()
        .checked_sub(results + 1)
        .map(|i| &messages[i])
    else {
        return Vec::new();
    };
    asked
        .tool_calls
        .iter()
        .map(|c| {
            let arguments = serde_json::from_str(&c.arguments).unwrap_or(serde_json::Value::Null);
            (c.name.clone(), arguments)
        })
        .collect()
}

/// Tokens whose text, leading whitespace aside, opens a JSON object or a code fence.
pub(crate) fn json_openers(tokenizer: &tokenizers::Tokenizer) -> Vec<u32> {
    (0..tokenizer.get_vocab_size(true) as u32)
        .filter(|&id| {
            // The raw (byte-level) form is a cheap first filter: only pieces holding a brace
            // or a backtick are decoded.
            tokenizer
                .id_to_token(id)
                .is_some_and(|raw| raw.contains(['{', '`']))
                && tokenizer.decode(&[id], false).is_ok_and(|text| {
                    let text = text.trim_start();
                    text.starts_with('{') || text.starts_with('`')
                })
        })
        .collect()
}

/// Sets every token the grammar forbids to −∞.
pub fn mask_logits(matcher: &mut Matcher, logits: &mut [f32]) -> Result<()> {
    let mask = matcher
        .compute_mask_or_eos()
        .map_err(|e| Error::Inference(format!("tool-call grammar: {e}")))?;
    let n = mask.len();
    for (token, logit) in logits.iter_mut().enumerate() {
        if token >= n || !mask.is_allowed(token as u32) {
            *logit = f32::NEG_INFINITY;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::answered_calls;
    use crate::{ChatMessage, Role, ToolCall};
    use serde_json::json;

    #[test]
    fn the_answered_calls_are_those_whose_results_end_the_conversation() {
        let mut asked = ChatMessage::new(Role::Assistant, String::new());
        asked.tool_calls = vec![ToolCall {
            id: "c1".into(),
            name: "clock".into(),
            arguments: "{}".into(),
        }];
        let result = ChatMessage::new(Role::Tool, "{\"utc\":\"now\"}");
        let conversation = vec![ChatMessage::user("time?"), asked, result];
        assert_eq!(
            answered_calls(&conversation),
            vec![("clock".to_string(), json!({}))]
        );
        let mut later = conversation.clone();
        later.push(ChatMessage::user("and now?"));
        assert!(
            answered_calls(&later).is_empty(),
            "a new user message ends the guard"
        );
        assert!(answered_calls(&[ChatMessage::user("hi")]).is_empty());
    }
}

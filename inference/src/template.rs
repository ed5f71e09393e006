//! The model's own chat template (Jinja, from the GGUF), rendered with minijinja, plus the
//! tool-calling convention for models whose template has none.

use minijinja::{context, Environment, ErrorKind};
use serde_json::{json, Value};

use crate::{ChatMessage, Error, Result, Role, ToolSpec};

/// Opens a tool call in the model's output; the JSON object follows, then [`TOOL_CALL_CLOSE`].
pub const TOOL_CALL_OPEN: &str = "<tool_call>";
pub const TOOL_CALL_CLOSE: &str = "</tool_call>";

pub struct ChatTemplate {
    env: Environment<'static>,
    /// Whether the template renders `tools` and `tool_calls` itself.
    native_tools: bool,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        // As Hugging Face renders chat templates.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| Error::ModelDir {
                dir: String::new(),
                message: format!("chat template does not parse: {e}"),
            })?;
        Ok(ChatTemplate {
            env,
            native_tools: source.contains("tools") && source.contains("tool_calls"),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// Renders a conversation with the generation prompt for the assistant's next turn.
    pub fn render(&self, messages: &[ChatMessage], tools: &[ToolSpec]) -> Result<String> {
        let (messages, tools_value) = if self.native_tools {
            (
                messages.iter().map(native_message).collect::<Vec<_>>(),
                tools_json(tools),
            )
        } else {
            (with_tool_convention(messages, tools), Value::Null)
        };
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| Error::InvalidRequest(format!("chat template: {e}")))?;
        template
            .render(context! {
                messages => messages,
                tools => tools_value,
                add_generation_prompt => true,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            })
            .map_err(|e| {
                Error::InvalidRequest(format!("the chat template refused the conversation: {e}"))
            })
    }
}

fn tools_json(tools: &[ToolSpec]) -> Value {
    if tools.is_empty() {
        return Value::Null;
    }
    Value::Array(
        tools
            .iter()
            .map(|t| json!({ "type": "function", "function": { "name": t.name, "description": t.description, "parameters": t.parameters } }))
            .collect(),
    )
}

fn native_message(message: &ChatMessage) -> Value {
    let mut value = json!({ "role": message.role, "content": message.content });
    if !message.tool_calls.is_empty() {
        value["tool_calls"] = Value::Array(
            message
                .tool_calls
                .iter()
                .map(|c| {
                    let arguments: Value = serde_json::from_str(&c.arguments).unwrap_or(Value::Null);
                    json!({ "id": c.id, "type": "function", "function": { "name": c.name, "arguments": arguments } })
                })
                .collect(),
        );
    }
    if let Some(id) = &message.tool_call_id {
        value["tool_call_id"] = json!(id);
    }
    value
}

/// For templates without tool support: tools are described in the system message (Hermes
/// convention, which small ChatML models have seen), calls are written as
/// `<tool_call>{"name":…,"arguments":{…}}</tool_call>`, results as `<tool_response>`.
fn with_tool_convention(messages: &[ChatMessage], tools: &[ToolSpec]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    let instructions = (!tools.is_empty()).then(|| {
        let signatures: Vec<String> = tools
            .iter()
            .map(|t| json!({ "name": t.name, "description": t.description, "parameters": t.parameters }).to_string())
            .collect();
        format!(
            "You can call functions. Their signatures are inside <tools></tools>:\n<tools>\n{}\n</tools>\nTo call one, answer with {TOOL_CALL_OPEN}{{\"name\": <function-name>, \"arguments\": <args-json-object>}}{TOOL_CALL_CLOSE}",
            signatures.join("\n")
        )
    });
    let has_system = messages.first().is_some_and(|m| m.role == Role::System);
    if let (Some(text), false) = (&instructions, has_system) {
        out.push(json!({ "role": "system", "content": text }));
    }
    for (i, message) in messages.iter().enumerate() {
        let mut content = message.content.clone();
        if i == 0 && has_system {
            if let Some(text) = &instructions {
                content = format!("{content}\n\n{text}");
            }
        }
        for call in &message.tool_calls {
            let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
            content.push_str(&format!(
                "{TOOL_CALL_OPEN}{}{TOOL_CALL_CLOSE}",
                json!({ "name": call.name, "arguments": arguments })
            ));
        }
        let role = match message.role {
            Role::Tool => {
                content = format!("<tool_response>\n{content}\n</tool_response>");
                "tool"
            }
            other => role_name(other),
        };
        out.push(json!({ "role": role, "content": content }));
    }
    out
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn renders_chatml_with_generation_prompt() {
        let t = ChatTemplate::new(CHATML, "<|im_start|>", "<|im_end|>").unwrap();
        let text = t.render(&[ChatMessage::user("Hi")], &[]).unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn tools_go_into_the_system_message_when_the_template_has_none() {
        let t = ChatTemplate::new(CHATML, "", "<|im_end|>").unwrap();
        let tool = ToolSpec {
            name: "get_weather".into(),
            description: "Weather for a city".into(),
            parameters: json!({"type":"object","properties":{"city":{"type":"string"}}}),
        };
        let text = t
            .render(
                &[
                    ChatMessage::system("Be brief."),
                    ChatMessage::user("Weather?"),
                ],
                &[tool],
            )
            .unwrap();
        assert!(text.starts_with("<|im_start|>system\nBe brief.\n\nYou can call functions."));
        assert!(text.contains("\"name\":\"get_weather\""));
        assert!(text.ends_with("<|im_start|>assistant\n"));
    }

    #[test]
    fn raise_exception_becomes_a_typed_error() {
        let t = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "").unwrap();
        assert!(matches!(
            t.render(&[ChatMessage::user("x")], &[]),
            Err(Error::InvalidRequest(_))
        ));
    }
}

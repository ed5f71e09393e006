//! Approval policies and the argument hash that binds a decision to the arguments it approved.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Who may approve a tool's calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approver {
    /// Anyone with access to the session: its token's holder or an operator.
    #[default]
    Any,
    /// Operators only (an API key, or a local caller of an open server): a session token's
    /// holder may reject the call but not approve it, once or for the session.
    Operator,
}

impl Approver {
    pub fn is_any(&self) -> bool {
        *self == Approver::Any
    }
}

/// A tool's argument schema, compiled once: a call whose arguments are not a JSON object, or
/// do not match the schema, fails back to the model before anything (approval included) is
/// applied. The default accepts any object.
#[derive(Clone, Default)]
pub struct ArgumentSchema(Option<std::sync::Arc<jsonschema::Validator>>);

impl std::fmt::Debug for ArgumentSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "ArgumentSchema(compiled)"
        } else {
            "ArgumentSchema(any object)"
        })
    }
}

/// A configured policy or argument schema that cannot be used (a configuration error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("invalid JSON Schema for the arguments: {0}")]
    Schema(String),
    #[error("`{0}` is not \"never\", \"always\" or a condition like `table == \"users\"`")]
    NotAPolicy(String),
    #[error("`{0}` is not an argument path (like `table` or `filter.days`)")]
    NotAPath(String),
    #[error("`{0}` is not a JSON value (strings need double quotes)")]
    NotALiteral(String),
}

/// Why a condition cannot be decided for a call's arguments (the call then needs approval).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum Undecided {
    #[error("the argument `{0}` is missing")]
    Missing(String),
    #[error("the argument `{path}` is {found} where {expected} is expected")]
    OtherKind {
        path: String,
        found: &'static str,
        expected: &'static str,
    },
    #[error("the argument `{path}` ({kind}) cannot be ordered")]
    Unordered { path: String, kind: &'static str },
}

impl ArgumentSchema {
    /// Compiles a JSON Schema; an invalid schema is a configuration error.
    pub fn compile(schema: &Value) -> Result<Self, PolicyError> {
        jsonschema::validator_for(schema)
            .map(|v| ArgumentSchema(Some(std::sync::Arc::new(v))))
            .map_err(|e| PolicyError::Schema(e.to_string()))
    }

    /// Why `arguments` are not acceptable (`None` when they are): at most three problems, each
    /// with the path it concerns.
    pub fn check(&self, arguments: &Value) -> Option<String> {
        if !arguments.is_object() {
            return Some(match arguments {
                Value::String(raw) => format!(
                    "the arguments are not a JSON object: {}",
                    raw.chars().take(200).collect::<String>()
                ),
                other => format!("the arguments are not a JSON object: {other}"),
            });
        }
        let validator = self.0.as_ref()?;
        let problems: Vec<String> = validator
            .iter_errors(arguments)
            .take(3)
            .map(|e| {
                let path = e.instance_path.to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect();
        (!problems.is_empty()).then(|| problems.join("; "))
    }
}

/// When a tool call needs a person's approval.
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalPolicy {
    Never,
    Always,
    /// Approval is needed when the condition holds for the call's arguments.
    When(Condition),
}

/// `PATH OP VALUE`: `PATH` is a dotted path into the arguments (`table`, `filter.days`), `OP`
/// one of `==`, `!=`, `>`, `>=`, `<`, `<=`, and `VALUE` a JSON literal (`"users"`, `100`,
/// `true`). Example: `approval = "table == \"users\""`. It fails closed: when the path is
/// missing, or its value is not of the literal's kind (a string where a number is compared),
/// the call needs approval.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub path: Vec<String>,
    pub op: Op,
    pub value: Value,
    pub source: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl ApprovalPolicy {
    /// Parses the config's `approval` value, naming what is wrong.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        match text.trim() {
            "never" => return Ok(ApprovalPolicy::Never),
            "always" => return Ok(ApprovalPolicy::Always),
            _ => {}
        }
        let ops = [
            ("==", Op::Eq),
            ("!=", Op::Ne),
            (">=", Op::Ge),
            ("<=", Op::Le),
            (">", Op::Gt),
            ("<", Op::Lt),
        ];
        let (at, token, op) = ops
            .iter()
            .filter_map(|(token, op)| text.find(token).map(|at| (at, *token, *op)))
            .min_by_key(|(at, token, _)| (*at, usize::MAX - token.len()))
            .ok_or_else(|| PolicyError::NotAPolicy(text.to_string()))?;
        let path = text[..at].trim();
        let literal = text[at + token.len()..].trim();
        if path.is_empty()
            || !path
                .split('.')
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
        {
            return Err(PolicyError::NotAPath(path.to_string()));
        }
        let value: Value = serde_json::from_str(literal)
            .map_err(|_| PolicyError::NotALiteral(literal.to_string()))?;
        Ok(ApprovalPolicy::When(Condition {
            path: path.split('.').map(str::to_string).collect(),
            op,
            value,
            source: text.trim().to_string(),
        }))
    }

    /// The policy as configured: `never`, `always` or the condition's text.
    pub fn describe(&self) -> String {
        match self {
            ApprovalPolicy::Never => "never".into(),
            ApprovalPolicy::Always => "always".into(),
            ApprovalPolicy::When(condition) => condition.source.clone(),
        }
    }

    /// Why the call needs approval, or `None` when it does not.
    pub fn requires_approval(&self, arguments: &Value) -> Option<String> {
        match self {
            ApprovalPolicy::Never => None,
            ApprovalPolicy::Always => Some("this tool always needs approval".into()),
            ApprovalPolicy::When(condition) => match condition.check(arguments) {
                Ok(true) => Some(format!("the arguments match `{}`", condition.source)),
                Ok(false) => None,
                Err(why) => Some(format!(
                    "{why}, so `{}` cannot be checked and approval is required",
                    condition.source
                )),
            },
        }
    }
}

/// The JSON kind of a value, for messages and for the comparability rule.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Condition {
    /// Whether the condition holds; `Err` (why not) when it cannot be decided: the path is
    /// missing, or the value there is of another kind than the literal (`null` compares with
    /// anything).
    fn check(&self, arguments: &Value) -> Result<bool, Undecided> {
        let path = self.path.join(".");
        let mut current = arguments;
        for part in &self.path {
            current = current
                .get(part)
                .ok_or_else(|| Undecided::Missing(path.clone()))?;
        }
        if !self.value.is_null() && kind(current) != kind(&self.value) {
            return Err(Undecided::OtherKind {
                path,
                found: kind(current),
                expected: kind(&self.value),
            });
        }
        let ordering = match (current.as_f64(), self.value.as_f64()) {
            (Some(a), Some(b)) => a.partial_cmp(&b),
            _ => match (current.as_str(), self.value.as_str()) {
                (Some(a), Some(b)) => Some(a.cmp(b)),
                _ => None,
            },
        };
        use std::cmp::Ordering::*;
        if ordering.is_none() && !matches!(self.op, Op::Eq | Op::Ne) {
            return Err(Undecided::Unordered {
                path,
                kind: kind(current),
            });
        }
        Ok(match self.op {
            Op::Eq => current == &self.value || ordering == Some(Equal),
            Op::Ne => !(current == &self.value || ordering == Some(Equal)),
            Op::Gt => ordering == Some(Greater),
            Op::Ge => matches!(ordering, Some(Greater | Equal)),
            Op::Lt => ordering == Some(Less),
            Op::Le => matches!(ordering, Some(Less | Equal)),
        })
    }
}

/// SHA-256 of the arguments' canonical JSON (object keys sorted at every level), hex.
pub fn args_hash(arguments: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(arguments, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn policies_parse_and_decide() {
        assert_eq!(
            ApprovalPolicy::parse("never")
                .unwrap()
                .requires_approval(&json!({})),
            None
        );
        assert!(ApprovalPolicy::parse("always")
            .unwrap()
            .requires_approval(&json!({}))
            .is_some());
        let users = ApprovalPolicy::parse(r#"table == "users""#).unwrap();
        assert!(users
            .requires_approval(&json!({"table": "users"}))
            .is_some());
        assert!(users.requires_approval(&json!({"table": "logs"})).is_none());
        let big = ApprovalPolicy::parse("filter.rows >= 100").unwrap();
        assert!(big
            .requires_approval(&json!({"filter": {"rows": 100}}))
            .is_some());
        assert!(big
            .requires_approval(&json!({"filter": {"rows": 99}}))
            .is_none());
        // Fail closed: a missing argument or one of another kind needs approval.
        assert!(big.requires_approval(&json!({})).is_some());
        let missing = big.requires_approval(&json!({"filter": {}})).unwrap();
        assert!(missing.contains("`filter.rows` is missing"), "{missing}");
        let amount = ApprovalPolicy::parse("amount > 100").unwrap();
        let text = amount
            .requires_approval(&json!({"amount": "5000"}))
            .unwrap();
        assert!(text.contains("is a string where a number"), "{text}");
        assert!(amount.requires_approval(&json!({"amount": 50})).is_none());
        assert!(amount
            .requires_approval(&json!({"amount": [500]}))
            .is_some());
        assert!(users.requires_approval(&json!({"table": 7})).is_some());
        assert!(users.requires_approval(&json!({})).is_some());
        let not_dry = ApprovalPolicy::parse("dry_run != true").unwrap();
        assert!(not_dry.requires_approval(&json!({})).is_some());
        assert!(not_dry
            .requires_approval(&json!({"dry_run": true}))
            .is_none());
        for bad in ["sometimes", "== 3", "table == users", "a..b == 1"] {
            assert!(ApprovalPolicy::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hash_ignores_key_order_but_not_values() {
        let a = args_hash(&json!({"b": 1, "a": {"y": [1, 2], "x": "s"}}));
        let b = args_hash(&json!({"a": {"x": "s", "y": [1, 2]}, "b": 1}));
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert_ne!(a, args_hash(&json!({"a": {"x": "s", "y": [2, 1]}, "b": 1})));
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use stead_testkit::arbitrary;

    use super::ApprovalPolicy;

    proptest! {
        /// Any policy text parses or is refused with a message; a parsed condition judges any
        /// arguments without a panic, and fails closed on what it cannot compare.
        #[test]
        fn any_condition_parses_or_is_refused_and_judges_any_arguments(
            path in "[a-z_.]{0,12}",
            op in arbitrary::one_of_or_any(&["==", "!=", ">", ">=", "<", "<="]),
            literal in arbitrary::json(),
            text in ".{0,60}",
            arguments in arbitrary::json(),
        ) {
            let shaped = format!("{path} {op} {literal}");
            for input in [shaped, text] {
                match ApprovalPolicy::parse(&input) {
                    Ok(policy) => {
                        let _ = policy.requires_approval(&arguments);
                        // Arguments without the path cannot satisfy "no approval needed" by
                        // accident: a missing path fails closed.
                        if let ApprovalPolicy::When(_) = policy {
                            let empty = serde_json::Value::Object(Default::default());
                            let closed = policy.requires_approval(&empty).is_some();
                            prop_assert!(closed || input.contains("null"));
                        }
                    }
                    Err(message) => prop_assert!(!message.to_string().is_empty()),
                }
            }
        }
    }
}

#[cfg(test)]
mod schema_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_are_checked_against_the_schema() {
        let schema = ArgumentSchema::compile(&json!({
            "type": "object",
            "properties": { "amount": { "type": "number" }, "to": { "type": "string" } },
            "required": ["amount"],
            "additionalProperties": false
        }))
        .unwrap();
        assert_eq!(schema.check(&json!({ "amount": 5, "to": "x" })), None);
        let missing = schema.check(&json!({ "to": "x" })).unwrap();
        assert!(missing.contains("amount"), "{missing}");
        let mistyped = schema.check(&json!({ "amount": "5000" })).unwrap();
        assert!(mistyped.starts_with("/amount: "), "{mistyped}");
        let extra = schema
            .check(&json!({ "amount": 1, "sneaky": true }))
            .unwrap();
        assert!(extra.contains("sneaky"), "{extra}");
        let raw = schema.check(&json!("{not json")).unwrap();
        assert!(
            raw.starts_with("the arguments are not a JSON object"),
            "{raw}"
        );
        // Without a schema, any object passes and anything else fails.
        assert_eq!(ArgumentSchema::default().check(&json!({})), None);
        assert!(ArgumentSchema::default().check(&json!([1])).is_some());
        assert!(ArgumentSchema::compile(&json!({ "type": 12 })).is_err());
    }
}

//! Expectations: what a case's turn must do, each graded on its own (docs/evals.md). A case
//! lists any number; a case with none is graded against its recording.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One expectation on a turn. Serialized with its `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Expectation {
    /// The turn calls `tool`, with arguments that each matcher accepts (`args` maps an
    /// argument's path — `table`, `filter.days` — to a matcher).
    ToolCalled {
        tool: String,
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        args: std::collections::BTreeMap<String, Matcher>,
    },
    /// The turn calls exactly these tools, in this order (`[]`: none).
    Tools { names: Vec<String> },
    /// The turn calls no tool.
    NoTool,
    /// The reply contains this text (case-insensitive).
    ReplyContains { text: String },
    /// The reply contains at least one of these (case-insensitive).
    ReplyContainsAny { texts: Vec<String> },
    /// The reply does not contain this text (case-insensitive).
    ReplyNotContains { text: String },
    /// The reply matches this regular expression.
    ReplyMatches { regex: String },
    /// The reply is JSON valid against this JSON Schema.
    ReplyJson { schema: Value },
    /// The reply is neither empty, nor tool-call text, nor built from the results because the
    /// model gave none (the check a person would make).
    ReplyUsable,
    /// A judge (any route) scores the turn against `rubric`; its verdict and reasoning are kept.
    /// Without `route`, the run's `judge_route`.
    Judge {
        rubric: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        route: Option<String>,
    },
    /// At most this many model calls.
    MaxSteps { steps: u32 },
    /// At most this many tokens, prompt and completion together.
    MaxTokens { tokens: u64 },
    /// At most this many milliseconds from the message to the turn's end.
    MaxLatencyMs { ms: f64 },
    /// The turn's model calls cost at most this much (USD, by the routes' prices).
    MaxCostUsd { usd: f64 },
    /// An approval the turn asks for is decided so (a case written by hand; a recorded case
    /// follows its recording).
    Approve { approved: bool },
}

impl Expectation {
    /// The grader's name in reports.
    pub fn name(&self) -> String {
        match self {
            Expectation::ToolCalled { tool, .. } => format!("tool_called {tool}"),
            Expectation::Tools { names } => format!("tools {names:?}"),
            Expectation::NoTool => "no_tool".into(),
            Expectation::ReplyContains { text } => format!("reply_contains {text:?}"),
            Expectation::ReplyContainsAny { texts } => format!("reply_contains_any {texts:?}"),
            Expectation::ReplyNotContains { text } => format!("reply_not_contains {text:?}"),
            Expectation::ReplyMatches { regex } => format!("reply_matches /{regex}/"),
            Expectation::ReplyJson { .. } => "reply_json".into(),
            Expectation::ReplyUsable => "reply_usable".into(),
            Expectation::Judge { .. } => "judge".into(),
            Expectation::MaxSteps { steps } => format!("max_steps {steps}"),
            Expectation::MaxTokens { tokens } => format!("max_tokens {tokens}"),
            Expectation::MaxLatencyMs { ms } => format!("max_latency_ms {ms}"),
            Expectation::MaxCostUsd { usd } => format!("max_cost_usd {usd}"),
            Expectation::Approve { approved } => format!("approve {approved}"),
        }
    }

    /// Whether this is a grader (`approve` only says how to decide).
    pub fn grades(&self) -> bool {
        !matches!(self, Expectation::Approve { .. })
    }

    /// Checks what can be checked before a run: regular expressions and schemas compile.
    pub fn check(&self) -> Result<(), InvalidExpectation> {
        match self {
            Expectation::ReplyMatches { regex } => compiles(regex),
            Expectation::ReplyJson { schema } => is_schema(schema),
            Expectation::ToolCalled { args, .. } => args.values().try_for_each(Matcher::check),
            _ => Ok(()),
        }
    }
}

/// How an argument is matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Matcher {
    /// Equal as JSON values.
    Equals(Value),
    /// The value, as text, contains this (case-insensitive).
    Contains(String),
    /// The value, as text, matches this regular expression.
    Regex(String),
    /// The value is valid against this JSON Schema.
    Schema(Value),
}

impl Matcher {
    fn check(&self) -> Result<(), InvalidExpectation> {
        match self {
            Matcher::Regex(regex) => compiles(regex),
            Matcher::Schema(schema) => is_schema(schema),
            _ => Ok(()),
        }
    }

    /// Why `value` (absent: `None`) is not accepted, or `None` when it is.
    pub fn rejects(&self, value: Option<&Value>) -> Option<String> {
        let Some(value) = value else {
            return Some("is missing".into());
        };
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let ok = match self {
            Matcher::Equals(want) => value == want,
            Matcher::Contains(part) => text.to_lowercase().contains(&part.to_lowercase()),
            Matcher::Regex(regex) => regex::Regex::new(regex).is_ok_and(|r| r.is_match(&text)),
            Matcher::Schema(schema) => {
                jsonschema::validator_for(schema).is_ok_and(|v| v.is_valid(value))
            }
        };
        (!ok).then(|| match self {
            Matcher::Equals(want) => format!("is {value}, expected {want}"),
            Matcher::Contains(part) => format!("is {value}, expected it to contain {part:?}"),
            Matcher::Regex(regex) => format!("is {value}, expected it to match /{regex}/"),
            Matcher::Schema(_) => format!("is {value}, not valid against the schema"),
        })
    }
}

/// The value at `path` (`a.b.c`, array indices as numbers) in `value`.
pub fn at_path<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(value, |v, part| match v {
        Value::Object(map) => map.get(part),
        Value::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

/// An expectation that cannot be used: a regular expression or a schema that does not compile.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidExpectation(pub String);

fn compiles(regex: &str) -> Result<(), InvalidExpectation> {
    regex::Regex::new(regex)
        .map(|_| ())
        .map_err(|e| InvalidExpectation(format!("`{regex}` is not a regular expression: {e}")))
}

fn is_schema(schema: &Value) -> Result<(), InvalidExpectation> {
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| InvalidExpectation(format!("not a JSON Schema: {e}")))
}

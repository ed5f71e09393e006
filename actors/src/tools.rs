//! Tools an agent can call. Every call carries the idempotency key
//! `"{session_id}:{call_id}"` (docs/architecture.md, invariant 4), so a call re-run after a
//! crash is recognisable.
//!
//! Built-in kinds: `webhook` (POST to a URL, docs/configuration.md), `memory` (the session's
//! durable key–value storage), `clock` and `calculator`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use stead_persistence::Kv;
use uuid::Uuid;

use crate::policy::ApprovalPolicy;
use stead_model::CallId;

/// How far a running tool has got: MCP `notifications/progress`, sent to WebSocket clients as
/// `tool_progress` frames (not journaled). Sub-agents and streaming webhooks extend it.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct ToolProgress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// An `agent` call's child session (docs/sessions.md, "Sub-agents").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_session_id: Option<String>,
    /// The child session's status (`running`, `awaiting_approval`, `idle`, `failed`,
    /// `closed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_status: Option<String>,
    /// What the child did last, in a line (`calling lookup`, `awaiting approval of
    /// delete_records`, or its reply's text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// Where a running tool reports its progress.
#[derive(Clone)]
pub struct ProgressSink(Arc<dyn Fn(ToolProgress) + Send + Sync>);

impl ProgressSink {
    pub fn new(report: impl Fn(ToolProgress) + Send + Sync + 'static) -> Self {
        ProgressSink(Arc::new(report))
    }

    /// A sink that drops every report.
    pub fn none() -> Self {
        ProgressSink::new(|_| {})
    }

    pub fn report(&self, progress: ToolProgress) {
        (self.0)(progress)
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressSink")
    }
}

/// What a running tool knows about its call.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub session_id: Uuid,
    /// The session's project: the one whose resources (collections) its tools read.
    pub project: Uuid,
    pub call_id: CallId,
    pub idempotency_key: String,
    /// Cancelled when the call is (`tool_call_cancelled`): a tool that can stop early does
    /// (MCP tools send `notifications/cancelled`); its answer is dropped either way.
    pub cancel: tokio_util::sync::CancellationToken,
    pub progress: ProgressSink,
    /// Who the session's calls are charged to (its creator's key fingerprint, or `local`):
    /// a tool that calls a model or embeddings route charges it there too.
    pub principal: String,
}

impl ToolContext {
    /// A call's context with the idempotency key `{session_id}:{call_id}`, never cancelled,
    /// reporting progress nowhere.
    pub fn new(session_id: Uuid, call_id: &str) -> Self {
        ToolContext {
            session_id,
            project: stead_persistence::DEFAULT_PROJECT,
            call_id: CallId::new(call_id.to_string()),
            idempotency_key: format!("{session_id}:{call_id}"),
            cancel: Default::default(),
            progress: ProgressSink::none(),
            principal: crate::state::LOCAL_PRINCIPAL.to_string(),
        }
    }
}

/// Why a tool call failed; the message goes back to the model as the tool's error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON schema of the arguments.
    fn parameters(&self) -> Value;
    fn approval(&self) -> &ApprovalPolicy;
    /// Safe to run twice with the same idempotency key.
    fn idempotent(&self) -> bool;
    async fn execute(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError>;
    /// A tool the session runs inside its decisions instead of calling [`Tool::execute`].
    fn builtin(&self) -> Option<crate::schedule_tool::Builtin> {
        None
    }
}

/// Tools whose list changes while Stead runs (an MCP server's). A session journals the list
/// (`tools_seen`) before a model call that sees a new one; its decisions use that list.
pub trait DynamicTools: Send + Sync {
    /// The tools offered now and the list's digest ([`tools_digest`]).
    fn seen(&self) -> (String, Vec<crate::events::SeenTool>);
    /// The tool behind a model-visible name, while its source offers it.
    fn tool(&self, name: &str) -> Option<Arc<dyn Tool>>;
    /// Names of the sources (MCP servers) the tools come from.
    fn sources(&self) -> Vec<String> {
        Vec::new()
    }
}

/// `sha256:` of a tool list's canonical JSON: what `tools_seen` records as its `digest`.
pub fn tools_digest(tools: &[crate::events::SeenTool]) -> String {
    use sha2::Digest;
    // Plain data with string keys: serializing cannot fail.
    let canonical = serde_json::to_vec(tools).unwrap_or_default();
    let digest = sha2::Sha256::digest(&canonical);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Name, description, policy and flag shared by the built-ins.
#[derive(Debug, Clone)]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    pub approval: ApprovalPolicy,
    pub idempotent: bool,
}

/// The [`Tool`] methods a tool with an `info: ToolInfo` field answers from it. With
/// `idempotent = EXPR`, `idempotent` answers that instead (built-in tools whose effect is
/// journaled with their result, read-only tools).
#[macro_export]
macro_rules! tool_info_accessors {
    () => {
        $crate::tool_info_accessors!(@described);
        fn idempotent(&self) -> bool {
            self.info.idempotent
        }
    };
    (idempotent = $idempotent:expr) => {
        $crate::tool_info_accessors!(@described);
        fn idempotent(&self) -> bool {
            $idempotent
        }
    };
    (@described) => {
        fn name(&self) -> &str {
            &self.info.name
        }
        fn description(&self) -> &str {
            &self.info.description
        }
        fn approval(&self) -> &$crate::policy::ApprovalPolicy {
            &self.info.approval
        }
    };
}

/// The current time in UTC.
pub struct ClockTool {
    pub info: ToolInfo,
}

#[async_trait]
impl Tool for ClockTool {
    tool_info_accessors!();

    fn parameters(&self) -> Value {
        json!({ "type": "object", "properties": {}, "additionalProperties": false })
    }

    async fn execute(&self, _arguments: Value, _context: &ToolContext) -> Result<Value, ToolError> {
        let now = chrono::Utc::now();
        Ok(json!({ "utc": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true) }))
    }
}

/// Arithmetic on numbers: `+ - * / %`, `^`, parentheses, unary minus.
pub struct CalculatorTool {
    pub info: ToolInfo,
}

#[async_trait]
impl Tool for CalculatorTool {
    tool_info_accessors!();

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": { "expression": { "type": "string", "maxLength": 200 } },
            "required": ["expression"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, arguments: Value, _context: &ToolContext) -> Result<Value, ToolError> {
        let expression = arguments["expression"]
            .as_str()
            .ok_or_else(|| ToolError("`expression` must be a string".into()))?;
        let value = calculate(expression).map_err(|e| ToolError(e.to_string()))?;
        // A whole number reads as one (`391`, not `391.0`): models quote what they are given.
        let value = if value.fract() == 0.0 && value.abs() < 9.0e15 {
            json!(value as i64)
        } else {
            json!(value)
        };
        Ok(json!({ "expression": expression, "value": value }))
    }
}

/// Why an arithmetic expression has no value; the calculator tool answers it to the model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalcError {
    #[error("unexpected `{0}`")]
    Unexpected(char),
    #[error("`{0}` is not a number")]
    NotANumber(String),
    #[error("missing `)`")]
    MissingParen,
    #[error("the expression ends too early")]
    EndsEarly,
    #[error("division by zero")]
    DivisionByZero,
    #[error("the result is not a finite number")]
    NotFinite,
}

/// Evaluates an arithmetic expression.
pub fn calculate(expression: &str) -> Result<f64, CalcError> {
    let tokens: Vec<char> = expression.chars().collect();
    let mut parser = Arith { tokens, at: 0 };
    let value = parser.sum()?;
    if parser.peek().is_some() {
        return Err(CalcError::Unexpected(parser.tokens[parser.at]));
    }
    if !value.is_finite() {
        return Err(CalcError::NotFinite);
    }
    Ok(value)
}

struct Arith {
    tokens: Vec<char>,
    at: usize,
}

impl Arith {
    /// The next character that is not whitespace (whitespace separates, it never joins).
    fn peek(&mut self) -> Option<char> {
        while self.tokens.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
        self.tokens.get(self.at).copied()
    }

    fn sum(&mut self) -> Result<f64, CalcError> {
        let mut value = self.product()?;
        while let Some(op @ ('+' | '-')) = self.peek() {
            self.at += 1;
            let rhs = self.product()?;
            value = if op == '+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    fn product(&mut self) -> Result<f64, CalcError> {
        let mut value = self.unary()?;
        while let Some(op @ ('*' | '/' | '%')) = self.peek() {
            self.at += 1;
            let rhs = self.unary()?;
            value = match op {
                '*' => value * rhs,
                '/' if rhs == 0.0 => return Err(CalcError::DivisionByZero),
                '/' => value / rhs,
                _ if rhs == 0.0 => return Err(CalcError::DivisionByZero),
                _ => value % rhs,
            };
        }
        Ok(value)
    }

    /// `^` binds tighter than unary minus (`-2^2` is −4) and is right-associative.
    fn power(&mut self) -> Result<f64, CalcError> {
        let base = self.atom()?;
        if self.peek() == Some('^') {
            self.at += 1;
            let exponent = self.unary()?;
            return Ok(base.powf(exponent));
        }
        Ok(base)
    }

    fn unary(&mut self) -> Result<f64, CalcError> {
        match self.peek() {
            Some('-') => {
                self.at += 1;
                Ok(-self.unary()?)
            }
            Some('+') => {
                self.at += 1;
                self.unary()
            }
            _ => self.power(),
        }
    }

    fn atom(&mut self) -> Result<f64, CalcError> {
        match self.peek() {
            Some('(') => {
                self.at += 1;
                let value = self.sum()?;
                if self.peek() != Some(')') {
                    return Err(CalcError::MissingParen);
                }
                self.at += 1;
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => {
                let start = self.at;
                while self
                    .tokens
                    .get(self.at)
                    .is_some_and(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E'))
                {
                    self.at += 1;
                }
                let text: String = self.tokens[start..self.at].iter().collect();
                text.parse().map_err(|_| CalcError::NotANumber(text))
            }
            Some(c) => Err(CalcError::Unexpected(c)),
            None => Err(CalcError::EndsEarly),
        }
    }
}

/// Get, set, list and delete notes in the session's durable key–value storage.
pub struct MemoryTool {
    pub info: ToolInfo,
    pub store: Arc<dyn Kv>,
    /// The operations this tool offers (a subset of get, set, list, delete), so one agent can
    /// have a safe "remember" and an approval-gated "forget" over the same storage.
    pub ops: Vec<String>,
}

impl MemoryTool {
    pub const OPS: [&'static str; 4] = ["get", "set", "list", "delete"];

    /// A memory tool with every operation.
    pub fn all_ops(info: ToolInfo, store: Arc<dyn Kv>) -> Self {
        MemoryTool {
            info,
            store,
            ops: Self::OPS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

#[async_trait]
impl Tool for MemoryTool {
    tool_info_accessors!();

    /// Only what its ops use: `value` where `set` is offered, the list prefix where `list` is
    /// (a small model offered a `value` on a delete-only tool takes it for a place to save).
    fn parameters(&self) -> Value {
        let has = |op: &str| self.ops.iter().any(|o| o == op);
        let key = if has("list") {
            "the note's name (for list: a prefix, empty for all)"
        } else {
            "the note's name"
        };
        let mut properties = serde_json::Map::new();
        properties.insert("op".into(), json!({ "type": "string", "enum": self.ops }));
        properties.insert(
            "key".into(),
            json!({ "type": "string", "maxLength": 100, "description": key }),
        );
        if has("set") {
            properties.insert(
                "value".into(),
                json!({ "type": "string", "maxLength": 2000, "description": "the note's text (for set)" }),
            );
        }
        json!({
            "type": "object",
            "properties": properties,
            // The key is required even for `list` (empty lists all): a small model left free
            // to omit it writes `set` calls without one.
            "required": ["op", "key"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let failed = |e: stead_persistence::Error| ToolError(format!("memory: {e}"));
        let key = arguments["key"].as_str().unwrap_or_default();
        let need_key = || {
            if key.is_empty() {
                Err(ToolError("`key` is required for this op".into()))
            } else {
                Ok(())
            }
        };
        let id = context.session_id;
        let op = arguments["op"].as_str().unwrap_or_default();
        if !self.ops.iter().any(|o| o == op) {
            return Err(ToolError(format!(
                "unknown op `{op}` (this tool offers: {})",
                self.ops.join(", ")
            )));
        }
        match op {
            "get" => {
                need_key()?;
                let entry = self.store.kv_get(id, key).await.map_err(failed)?;
                Ok(json!({ "key": key, "value": entry.map(|e| e.value) }))
            }
            "set" => {
                need_key()?;
                let value = arguments.get("value").cloned().unwrap_or(Value::Null);
                self.store
                    .kv_set(id, key, value.clone())
                    .await
                    .map_err(failed)?;
                Ok(json!({ "key": key, "value": value }))
            }
            "list" => {
                let entries = self.store.kv_list(id, key).await.map_err(failed)?;
                let keys: Vec<String> = entries.into_iter().map(|e| e.key).collect();
                Ok(json!({ "keys": keys }))
            }
            "delete" => {
                need_key()?;
                let existed = self.store.kv_delete(id, key).await.map_err(failed)?;
                Ok(json!({ "key": key, "deleted": existed }))
            }
            other => Err(ToolError(format!(
                "unknown op `{other}` (get, set, list, delete)"
            ))),
        }
    }
}

/// The most bytes a webhook's answer may be: a larger one fails the call as soon as it is seen
/// (its `Content-Length`, or the bytes read so far), before it is buffered whole.
pub const MAX_WEBHOOK_ANSWER: usize = 1 << 20;

/// The HTTP client webhook tools call through (docs/security.md, "Webhooks"): it follows no
/// redirect (a 3xx fails the call — a redirect would carry the body and the entry's secret
/// headers to another host), sends no `Referer`, and ignores `HTTP(S)_PROXY` in the
/// environment (a webhook's body and headers go to its URL's host and nowhere else).
pub fn webhook_client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .user_agent(concat!("stead/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .referer(false)
        .no_proxy()
        .build()
}

/// A 2xx answer's JSON body, read at most [`MAX_WEBHOOK_ANSWER`] bytes.
async fn read_answer(mut response: reqwest::Response) -> Result<Value, ToolError> {
    let too_large = || {
        ToolError(format!(
            "webhook answered with more than {} KiB (the limit of a tool result)",
            MAX_WEBHOOK_ANSWER >> 10
        ))
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_WEBHOOK_ANSWER as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_WEBHOOK_ANSWER {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                return Err(ToolError(format!(
                    "webhook answer could not be read: {}",
                    e.without_url()
                )))
            }
        }
    }
    serde_json::from_slice(&body).map_err(|e| {
        ToolError(format!(
            "webhook answered with a body that is not JSON: {e}"
        ))
    })
}

/// `POST {url}` with `Idempotency-Key` and `{"session_id","call_id","tool","arguments"}`; a 2xx
/// JSON body is the result. Idempotent webhooks are retried on failure (connection errors,
/// timeouts, 5xx and 429) with exponential backoff; others are tried once.
pub struct WebhookTool {
    pub info: ToolInfo,
    pub url: String,
    /// Sent with every request (e.g. credentials read from the environment at start, so they
    /// need not live in the URL); values are never logged or shown.
    pub headers: reqwest::header::HeaderMap,
    pub parameters: Value,
    pub timeout: Duration,
    pub attempts: u32,
    pub client: reqwest::Client,
}

#[async_trait]
impl Tool for WebhookTool {
    tool_info_accessors!();

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    async fn execute(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let body = json!({
            "session_id": context.session_id,
            "call_id": context.call_id,
            "tool": self.info.name,
            "arguments": arguments,
        });
        let attempts = if self.info.idempotent {
            self.attempts.max(1)
        } else {
            1
        };
        let mut last_error = String::new();
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 * 2u64.pow(attempt - 1))).await;
            }
            let response = self
                .client
                .post(&self.url)
                .headers(self.headers.clone())
                .header("Idempotency-Key", &context.idempotency_key)
                .timeout(self.timeout)
                .json(&body)
                .send()
                .await;
            match response {
                Ok(response) if response.status().is_success() => {
                    // Errors never carry the URL: it may hold credentials, and the model and
                    // the session's users read `tool_call_failed`.
                    return read_answer(response).await;
                }
                Ok(response) => {
                    let status = response.status();
                    last_error = if status.is_redirection() {
                        format!("webhook answered {status}: redirects are not followed")
                    } else {
                        format!("webhook answered {status}")
                    };
                    if !(status.is_server_error() || status.as_u16() == 429) {
                        break; // a 4xx will not get better
                    }
                }
                Err(error) => {
                    last_error = if error.is_timeout() {
                        format!("webhook timed out after {:?}", self.timeout)
                    } else {
                        format!("webhook unreachable: {}", error.without_url())
                    };
                }
            }
        }
        Err(ToolError(last_error))
    }
}

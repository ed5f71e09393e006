//! What the request log keeps of one call through the router — one type from the router that
//! writes it, through the database that stores it, to the edge that lists it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use ts_rs::TS;
use uuid::Uuid;

/// One call through the router (chat or embeddings), as `GET /v1/gateway/logs` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct RequestLogEntry {
    #[ts(type = "string")]
    pub id: Uuid,
    #[ts(type = "string")]
    pub at: DateTime<Utc>,
    #[ts(type = "string | null")]
    pub session_id: Option<Uuid>,
    /// The API key's name (the first hex digits of its digest), `local` for loopback callers,
    /// none for session actors.
    pub api_key: Option<String>,
    pub route: String,
    /// The target that answered (or was tried last).
    pub provider: Option<String>,
    pub model: Option<String>,
    pub status: LogStatus,
    /// Every attempt at every target, in order.
    pub attempts: Vec<AttemptRecord>,
    pub latency_ms: f64,
    pub ttft_ms: Option<f64>,
    #[ts(type = "number")]
    pub tokens_in: u64,
    #[ts(type = "number")]
    pub tokens_out: u64,
    pub cost: f64,
    pub cache_hit: bool,
    pub stream: bool,
    #[ts(type = "Record<string, unknown>")]
    pub metadata: Map<String, Value>,
    pub error: Option<String>,
    /// `{"request", "response"}` with `[gateway.log] bodies = "full"`, else null.
    #[ts(type = "{ request: unknown; response: unknown } | null")]
    pub bodies: Value,
    /// The route's guardrails that acted on the call, in order (empty: none did).
    #[serde(default)]
    pub guardrails: Vec<GuardrailEntry>,
}

/// A guardrail that acted on a call (docs/guardrails.md): where, what it did, and the
/// entities it found — never the text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct GuardrailEntry {
    pub guardrail: String,
    /// `request` (the messages or embedding inputs sent) or `answer`.
    pub place: String,
    /// `redact`, `block`, `flag`, or `error` (a model check that failed or missed its deadline).
    pub effect: String,
    pub entities: Vec<String>,
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum LogStatus {
    /// Answered (by a target, or by the cache).
    Ok,
    /// Every target failed, or none was available.
    Error,
    /// Refused by a per-key or per-route rate limit before any target was tried.
    RateLimited,
    /// Refused by a strict budget before any target was tried.
    BudgetExceeded,
    /// The caller went away before the answer (tokens and cost are estimates).
    Abandoned,
}

impl LogStatus {
    pub const ALL: [LogStatus; 5] = [
        LogStatus::Ok,
        LogStatus::Error,
        LogStatus::RateLimited,
        LogStatus::BudgetExceeded,
        LogStatus::Abandoned,
    ];

    /// The status as stored and filtered on (`?status=`).
    pub fn as_str(self) -> &'static str {
        match self {
            LogStatus::Ok => "ok",
            LogStatus::Error => "error",
            LogStatus::RateLimited => "rate_limited",
            LogStatus::BudgetExceeded => "budget_exceeded",
            LogStatus::Abandoned => "abandoned",
        }
    }

    pub fn parse(text: &str) -> Option<LogStatus> {
        LogStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for LogStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt at one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct AttemptRecord {
    pub provider: String,
    pub model: String,
    /// `ok`, `error`, `skipped` (cooling down) or `unavailable`.
    pub outcome: String,
    /// The failure class (`status`, `connect`, `timeout`, `ttft_timeout`, `stream`, `invalid`,
    /// `unavailable`, `cooldown`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub error_kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub retry_after_ms: Option<f64>,
    pub latency_ms: f64,
    /// Text this attempt added to the answer (mid-stream failover: the next attempt continues
    /// after it).
    #[serde(default)]
    #[ts(type = "number")]
    pub streamed_chars: usize,
}

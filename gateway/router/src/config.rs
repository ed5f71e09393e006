//! The router's configuration: `[[routes]]` (docs/configuration.md, with the keys below beside
//! the fixed ones) and `[gateway]` (cache, cooldown, limits, prices, request log). Every key has a
//! default, so `[[routes]] name/targets` alone is a working route.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A route: the name callers ask for as `model`, and the targets that may answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    pub name: String,
    /// Tried in order (or in a weighted random order when any target has a `weight`).
    pub targets: Vec<TargetConfig>,
    /// Requests per minute through this route, all callers together (unset: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_min: Option<u32>,
    /// Tokens (prompt + completion) per minute through this route (unset: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_min: Option<u64>,
    /// Whether answers of this route are cached when `[gateway.cache]` is enabled.
    #[serde(default = "yes")]
    pub cache: bool,
    /// The `[[guardrails]]` its requests pass, in order (docs/guardrails.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guardrails: Vec<String>,
    /// Whether its models see images (docs/multimodal.md). Unset: each target's provider
    /// decides — remote providers do, the local engine's text models do not. A request with
    /// images skips the targets that do not see them, and is refused when none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<bool>,
}

/// One provider's model within a route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    pub provider: String,
    pub model: String,
    /// Relative share of first tries when the route balances load (unset on every target: the
    /// configured order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Deadline of one attempt, from sending the request to the last byte.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: f64,
    /// A streamed attempt whose first token has not arrived by then is abandoned (unset: only
    /// `timeout_secs` applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_timeout_secs: Option<f64>,
    /// `max_tokens` when the caller sets none (unset: the provider's default; 512 on the local
    /// engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub retry: RetryConfig,
}

/// How one target is retried before the route falls back to the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Tries of this target in all (1 = no retry).
    pub attempts: u32,
    pub backoff: BackoffKind,
    /// The first wait; `linear` adds it per try, `exponential` doubles it per try.
    pub base_ms: u64,
    /// The longest wait.
    pub max_ms: u64,
    /// Full jitter: each wait is drawn uniformly from [0, computed wait].
    pub jitter: bool,
    /// HTTP statuses that are retried.
    pub on_status: Vec<u16>,
    /// Failures without a status that are retried: `connect`, `timeout`, `ttft_timeout`,
    /// `stream` (a stream that broke or was unreadable).
    pub on_errors: Vec<String>,
    /// A `Retry-After` longer than this is not waited for: the route moves on at once.
    pub max_retry_after_secs: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            attempts: 2,
            backoff: BackoffKind::Exponential,
            base_ms: 200,
            max_ms: 5_000,
            jitter: true,
            on_status: vec![408, 409, 429, 500, 502, 503, 504],
            on_errors: ["connect", "timeout", "ttft_timeout", "stream"]
                .map(String::from)
                .to_vec(),
            max_retry_after_secs: 30.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackoffKind {
    Constant,
    Linear,
    Exponential,
}

/// `[gateway]`: what applies across routes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    pub cache: CacheConfig,
    /// A target that fails this many attempts in a row is taken out of every route…
    pub cooldown_failures: u32,
    /// …for this long; then one call may try it again (half-open).
    pub cooldown_secs: f64,
    /// Per API key (each key separately; loopback callers without a key count as one key).
    pub limits: KeyLimits,
    /// USD per million tokens, by model name (the target's `model`, or `provider/model` to
    /// price one provider's model apart). Unpriced models cost 0.
    pub prices: BTreeMap<String, Price>,
    pub log: RequestLogConfig,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            cache: CacheConfig::default(),
            cooldown_failures: 3,
            cooldown_secs: 30.0,
            limits: KeyLimits::default(),
            prices: BTreeMap::new(),
            log: RequestLogConfig::default(),
        }
    }
}

/// `[gateway.cache]`: the exact-match response cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    pub enabled: bool,
    pub ttl_secs: u64,
    pub max_entries: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: false,
            ttl_secs: 300,
            max_entries: 10_000,
        }
    }
}

/// `[gateway.limits]`: what each API key may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct KeyLimits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_per_min: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_min: Option<u64>,
    /// USD a key may spend per `budget_window_secs` (unset: no budget).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_window_secs: Option<u64>,
}

impl KeyLimits {
    pub fn budget_window(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.budget_window_secs.unwrap_or(86_400).max(1))
    }
}

/// A model's price in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Price {
    pub input: f64,
    pub output: f64,
}

/// `[gateway.log]`: the request log's batching.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestLogConfig {
    pub enabled: bool,
    /// Rows written per batch at most.
    pub batch_size: usize,
    /// A partial batch is written after this long.
    pub flush_ms: u64,
    /// Rows waiting to be written at most; beyond it rows are dropped (and counted), never
    /// slowing a model call.
    pub queue: usize,
    /// What of a call's content a row keeps.
    pub bodies: LogBodies,
}

/// `[gateway.log] bodies`: what of a call's content its log row keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogBodies {
    /// Nothing a caller wrote: no bodies, and no caller metadata either.
    None,
    /// The call's facts and the caller's metadata, no message content (the default).
    #[default]
    Metadata,
    /// Also the request (messages, tools, parameters) and the response (text, tool calls).
    /// Never credentials: they travel in headers, which are not kept.
    Full,
}

impl Default for RequestLogConfig {
    fn default() -> Self {
        RequestLogConfig {
            enabled: true,
            batch_size: 512,
            flush_ms: 200,
            queue: 65_536,
            bodies: LogBodies::Metadata,
        }
    }
}

fn yes() -> bool {
    true
}

fn default_timeout_secs() -> f64 {
    120.0
}

impl GatewayConfig {
    /// The first problem with the values, as `key: problem`.
    pub fn problem(&self) -> Option<String> {
        if self.cache.enabled && (self.cache.ttl_secs == 0 || self.cache.max_entries == 0) {
            return Some("cache: ttl_secs and max_entries must be at least 1".into());
        }
        if self.cooldown_failures == 0 {
            return Some("cooldown_failures: must be at least 1".into());
        }
        if !(self.cooldown_secs.is_finite() && self.cooldown_secs >= 0.0) {
            return Some("cooldown_secs: must be a number of seconds".into());
        }
        if self.limits.requests_per_min == Some(0) || self.limits.tokens_per_min == Some(0) {
            return Some(
                "limits: a per-minute limit must be at least 1 (leave it out for none)".into(),
            );
        }
        if let Some(budget) = self.limits.budget_usd {
            if !(budget.is_finite() && budget >= 0.0) {
                return Some("limits.budget_usd: must be a non-negative number".into());
            }
        }
        for (model, price) in &self.prices {
            let valid = |x: f64| x.is_finite() && x >= 0.0;
            if !valid(price.input) || !valid(price.output) {
                return Some(format!(
                    "prices.{model}: prices must be non-negative numbers"
                ));
            }
        }
        if self.log.batch_size == 0 || self.log.queue == 0 {
            return Some("log: batch_size and queue must be at least 1".into());
        }
        None
    }
}

impl RouteConfig {
    /// The first problem with the route's own values (provider names are checked by the
    /// caller, which knows the providers), as `key: problem`.
    pub fn problem(&self) -> Option<String> {
        if self.requests_per_min == Some(0) || self.tokens_per_min == Some(0) {
            return Some("a per-minute limit must be at least 1 (leave it out for none)".into());
        }
        for (j, target) in self.targets.iter().enumerate() {
            let key = format!("targets[{j}]");
            if !(target.timeout_secs.is_finite() && target.timeout_secs > 0.0) {
                return Some(format!("{key}.timeout_secs: must be more than 0"));
            }
            if let Some(ttft) = target.ttft_timeout_secs {
                if !(ttft.is_finite() && ttft > 0.0) {
                    return Some(format!("{key}.ttft_timeout_secs: must be more than 0"));
                }
            }
            if target.weight == Some(0) {
                return Some(format!("{key}.weight: must be at least 1"));
            }
            if target.max_tokens == Some(0) {
                return Some(format!("{key}.max_tokens: must be at least 1"));
            }
            let retry = &target.retry;
            if retry.attempts == 0 {
                return Some(format!("{key}.retry.attempts: must be at least 1"));
            }
            if retry.max_ms < retry.base_ms {
                return Some(format!("{key}.retry.max_ms: must be at least base_ms"));
            }
            for error in &retry.on_errors {
                if !["connect", "timeout", "ttft_timeout", "stream"].contains(&error.as_str()) {
                    return Some(format!(
                        "{key}.retry.on_errors: `{error}` is not one of connect, timeout, \
                         ttft_timeout, stream"
                    ));
                }
            }
            if !(retry.max_retry_after_secs.is_finite() && retry.max_retry_after_secs >= 0.0) {
                return Some(format!(
                    "{key}.retry.max_retry_after_secs: must be a number of seconds"
                ));
            }
        }
        None
    }
}

//! The model router's request log as stored: rows, their filters and newest-first pages, and
//! the statistics computed over them (grouped by route, provider, model or a metadata key).

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::{Error, Result};

pub use stead_model::log::{AttemptRecord, LogStatus, RequestLogEntry};

/// Which rows: every set field must match.
#[derive(Debug, Clone, Default)]
pub struct RequestLogQuery {
    pub route: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub status: Option<String>,
    pub session_id: Option<Uuid>,
    pub api_key: Option<String>,
    pub cache_hit: Option<bool>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// `(key, value)`: the metadata entry `key`, as text, equals `value`.
    pub metadata: Option<(String, String)>,
    /// Only the calls charged within a project (`None`: every row, the installation's view).
    pub scope: Option<SpendScope>,
    /// Page size; clamped to `1..=MAX_LOG_PAGE` (default 100).
    pub limit: u32,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
}

pub const MAX_LOG_PAGE: u32 = 1000;
/// Rows per INSERT statement of a batch: small enough that a statement's arguments stay small
/// allocations (large ones are mapped and unmapped each time, which costs page faults).
pub(crate) const LOG_ROWS_PER_STATEMENT: usize = 32;
const DEFAULT_LOG_PAGE: u32 = 100;
/// Most rows one statistics query reads (the newest).
pub const MAX_STATS_ROWS: i64 = 1_000_000;

impl RequestLogQuery {
    pub(crate) fn page_size(&self) -> u32 {
        match self.limit {
            0 => DEFAULT_LOG_PAGE,
            n => n.min(MAX_LOG_PAGE),
        }
    }

    pub(crate) fn cursor_id(&self) -> Result<Option<Uuid>> {
        self.cursor
            .as_deref()
            .map(|c| {
                Uuid::try_parse(c)
                    .map_err(|_| Error::InvalidInput(format!("malformed cursor `{c}`")))
            })
            .transpose()
    }

    /// The metadata key, checked: letters, digits, `_`, `-` and `.` only (it becomes part of a
    /// JSON path).
    /// `key` when it may name a metadata entry (1 to 64 letters, digits, `_`, `-`, `.`).
    pub fn metadata_key(key: &str) -> Result<&str> {
        if key.is_empty()
            || key.len() > 64
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(Error::InvalidInput(format!(
                "metadata key `{key}` must be 1 to 64 letters, digits, `_`, `-` or `.`"
            )));
        }
        Ok(key)
    }
}

/// Whose calls a project's spend holds: those charged to its keys (`key:{id}`), to its
/// signed-in people (`prefix`: `user:{project}:`), and — for the default project, which is the
/// installation's — those charged to no virtual key (configured keys, `local`, session actors
/// of those).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpendScope {
    pub api_keys: Vec<String>,
    pub prefix: Option<String>,
    pub installation: bool,
}

/// One charged call, as a project's spend report reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpendRow {
    pub at: DateTime<Utc>,
    pub api_key: Option<String>,
    pub route: String,
    pub model: Option<String>,
    pub session_id: Option<Uuid>,
    pub cost: f64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// A page of the log, newest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestLogPage {
    pub entries: Vec<RequestLogEntry>,
    pub next_cursor: Option<String>,
}

pub(crate) fn into_log_page(mut rows: Vec<RequestLogEntry>, limit: u32) -> RequestLogPage {
    let next_cursor = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(|e| e.id.to_string())
    } else {
        None
    };
    RequestLogPage {
        entries: rows,
        next_cursor,
    }
}

/// What statistics are grouped by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatsGroupBy {
    Route,
    Provider,
    Model,
    /// A metadata key's value.
    Metadata(String),
}

impl std::str::FromStr for StatsGroupBy {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text {
            "route" => Ok(StatsGroupBy::Route),
            "provider" => Ok(StatsGroupBy::Provider),
            "model" => Ok(StatsGroupBy::Model),
            other => match other.strip_prefix("metadata.") {
                Some(key) => Ok(StatsGroupBy::Metadata(
                    RequestLogQuery::metadata_key(key)?.to_string(),
                )),
                None => Err(Error::InvalidInput(format!(
                    "group_by `{other}` is not route, provider, model or metadata.KEY"
                ))),
            },
        }
    }
}

/// One group's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsRow {
    /// The group's value (`null`: rows without one).
    pub key: Option<String>,
    pub count: u64,
    pub errors: u64,
    pub cache_hits: u64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub cost: f64,
}

/// The columns a statistics query reads, per row.
pub(crate) struct StatsInput {
    pub key: Option<String>,
    pub ok: bool,
    pub cache_hit: bool,
    pub latency_ms: f64,
    pub ttft_ms: Option<f64>,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub cost: f64,
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Groups rows and computes each group's figures, groups in key order.
pub(crate) fn compute_stats(rows: Vec<StatsInput>) -> Vec<StatsRow> {
    let mut groups: std::collections::BTreeMap<Option<String>, Vec<StatsInput>> =
        std::collections::BTreeMap::new();
    for row in rows {
        groups.entry(row.key.clone()).or_default().push(row);
    }
    groups
        .into_iter()
        .map(|(key, rows)| {
            let mut latency: Vec<f64> = rows.iter().map(|r| r.latency_ms).collect();
            latency.sort_by(f64::total_cmp);
            let mut ttft: Vec<f64> = rows.iter().filter_map(|r| r.ttft_ms).collect();
            ttft.sort_by(f64::total_cmp);
            StatsRow {
                key,
                count: rows.len() as u64,
                errors: rows.iter().filter(|r| !r.ok).count() as u64,
                cache_hits: rows.iter().filter(|r| r.cache_hit).count() as u64,
                latency_p50_ms: percentile(&latency, 50.0),
                latency_p99_ms: percentile(&latency, 99.0),
                ttft_p50_ms: (!ttft.is_empty()).then(|| percentile(&ttft, 50.0)),
                ttft_p99_ms: (!ttft.is_empty()).then(|| percentile(&ttft, 99.0)),
                tokens_in: rows.iter().map(|r| r.tokens_in).sum(),
                tokens_out: rows.iter().map(|r| r.tokens_out).sum(),
                cost: rows.iter().map(|r| r.cost).sum(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 50.0);
        assert_eq!(percentile(&values, 99.0), 99.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
    }

    #[test]
    fn group_by_parses_metadata_keys_and_refuses_paths() {
        assert_eq!(
            "route".parse::<StatsGroupBy>().unwrap(),
            StatsGroupBy::Route
        );
        assert_eq!(
            "metadata.team".parse::<StatsGroupBy>().unwrap(),
            StatsGroupBy::Metadata("team".into())
        );
        assert!("metadata.a'b".parse::<StatsGroupBy>().is_err());
        assert!("latency".parse::<StatsGroupBy>().is_err());
    }
}

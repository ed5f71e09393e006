//! How often each guardrail acted, for `/metrics`: one counter per guardrail, place (`request`,
//! `answer`, `tool_result`) and effect (`redact`, `block`, `flag`, `approve`, or `error` for a
//! check that failed). A check that found nothing is not counted. Process-wide: a route's
//! guardrails and an agent's count into the same series.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Mutex, PoisonError};

/// Where a guardrail checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    Request,
    Answer,
    ToolResult,
}

impl Place {
    pub fn as_str(self) -> &'static str {
        match self {
            Place::Request => "request",
            Place::Answer => "answer",
            Place::ToolResult => "tool_result",
        }
    }
}

type Key = (String, Place, &'static str);

static VERDICTS: Mutex<BTreeMap<Key, u64>> = Mutex::new(BTreeMap::new());

/// Counts one act of `guardrail` at `place`.
pub fn count(guardrail: &str, place: Place, effect: &'static str) {
    *VERDICTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry((guardrail.to_string(), place, effect))
        .or_default() += 1;
}

/// The counters in the Prometheus text format (nothing before the first act).
pub fn render() -> String {
    let verdicts = VERDICTS.lock().unwrap_or_else(PoisonError::into_inner);
    if verdicts.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "# HELP stead_guardrail_verdicts_total Guardrails' acts by guardrail, place and effect\n\
         # TYPE stead_guardrail_verdicts_total counter\n",
    );
    for ((guardrail, place, effect), n) in verdicts.iter() {
        // Guardrail names come from the operator's configuration; quotes and backslashes are
        // escaped as the format asks.
        let name = guardrail.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            out,
            "stead_guardrail_verdicts_total{{guardrail=\"{name}\",place=\"{}\",effect=\"{effect}\"}} {n}",
            place.as_str()
        );
    }
    out
}

//! What sessions are configured with: the agents (loop rules, prompt, tools) and the
//! lifecycle settings (snapshots, passivation, restarts, leases).

use std::sync::Arc;

use crate::decide::AgentRules;
use crate::tools::{DynamicTools, Tool};

/// An agent's configured tools by name, in the configuration's order.
pub type AgentTools = indexmap::IndexMap<String, Arc<dyn Tool>>;

/// An agent: its loop rules, prompt and tools.
pub struct Agent {
    pub name: String,
    pub system_prompt: String,
    pub rules: AgentRules,
    /// The configured tools by name, in the configuration's order: the order the model sees
    /// them in (a small model's choice between two tools depends on it).
    pub tools: AgentTools,
    /// Tools from sources whose lists change (MCP servers), when the agent has any.
    pub dynamic: Option<Arc<dyn DynamicTools>>,
    /// Checks on its tools' results before the model sees them (`[[agents]] guardrails`).
    pub guardrails: Option<Arc<ResultGuard>>,
}

/// An agent's guardrails over its tools' results (docs/guardrails.md, "Tool results").
pub struct ResultGuard {
    /// In the order the agent lists them.
    pub guardrails: Vec<Arc<stead_guardrails::Guardrail>>,
    /// The model that checks asking one go through (the router, in `stead serve`).
    pub judge: Option<Arc<dyn stead_guardrails::judge::Judge>>,
}

impl Agent {
    /// The tool behind a name the model used: a configured one, else a dynamic one.
    pub fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools
            .get(name)
            .cloned()
            .or_else(|| self.dynamic.as_ref()?.tool(name))
    }
}

/// When actors write snapshots and when idle ones go to sleep.
#[derive(Debug, Clone, Copy)]
pub struct Lifecycle {
    /// Write a snapshot of the folded state every this many events, or every
    /// entries / [`SNAPSHOT_SIZE_DIVISOR`] events when that is more ([`Lifecycle::snapshot_due`]).
    pub snapshot_every: i64,
    /// Stop an actor that has had no work and no subscribers for this long; the next access
    /// re-activates it from its snapshot and journal.
    pub passivate_after: std::time::Duration,
    /// Stop sooner an actor whose turn is parked on a person's decision (an approval of a
    /// call, a held result or a budget) and that has no subscribers: a live actor costs tens of
    /// KiB (ractor's mailboxes alone several), a passivated one nothing, and the decision or
    /// the approval's expiry (a due-index row) re-activates it in a few milliseconds.
    pub passivate_parked_after: std::time::Duration,
    /// A session whose actor fails this many times within `restart_window` is failed.
    pub restart_limit: u32,
    pub restart_window: std::time::Duration,
    /// Wait before the first restart, doubling per failure in the window up to the max.
    pub restart_backoff: std::time::Duration,
    pub restart_backoff_max: std::time::Duration,
    /// How long an activation's lease lasts without renewal (renewed every third of it); a
    /// node that dies holds its sessions at most this long.
    pub lease_ttl: std::time::Duration,
    /// User messages a session holds while a turn runs; more are refused (`queue_full`), so
    /// that one token cannot queue unbounded work.
    pub max_queued_messages: usize,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            snapshot_every: 100,
            passivate_after: std::time::Duration::from_secs(300),
            passivate_parked_after: std::time::Duration::from_secs(10),
            restart_limit: 5,
            restart_window: std::time::Duration::from_secs(60),
            restart_backoff: std::time::Duration::from_millis(100),
            restart_backoff_max: std::time::Duration::from_secs(5),
            lease_ttl: std::time::Duration::from_secs(30),
            max_queued_messages: 32,
        }
    }
}

/// A snapshot costs what the state holds (a transcript never compacted, its client ids): a
/// large state is written once per this share of its entries in events, so snapshots cost
/// about the same per event however long a session grows, and an activation folds at most
/// that many events after the snapshot it reads.
pub const SNAPSHOT_SIZE_DIVISOR: usize = 4;

impl Lifecycle {
    /// Whether a snapshot is due `since` events after the last, for a state of `entries`
    /// ([`crate::SessionState::entries`]).
    pub fn snapshot_due(&self, since: i64, entries: usize) -> bool {
        let by_size = i64::try_from(entries / SNAPSHOT_SIZE_DIVISOR).unwrap_or(i64::MAX);
        since >= self.snapshot_every.max(by_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_state_is_snapshotted_less_often_in_proportion() {
        let lifecycle = Lifecycle::default();
        assert!(!lifecycle.snapshot_due(99, 10));
        assert!(lifecycle.snapshot_due(100, 10));
        assert!(lifecycle.snapshot_due(100, 400));
        assert!(!lifecycle.snapshot_due(100, 40_000));
        assert!(!lifecycle.snapshot_due(9_999, 40_000));
        assert!(lifecycle.snapshot_due(10_000, 40_000));
    }
}

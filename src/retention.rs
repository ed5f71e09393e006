//! Retention. Journals: ended sessions keep their full journal for `sessions.keep_journal_days`
//! after their last change, then are compacted to a snapshot plus a summary. Open and parked
//! sessions are never touched (the store refuses them inside the compaction's transaction).
//! The audit trail: acts older than `[audit] retention_days` are removed once a day.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use stead_actors::replay;
use stead_persistence::{Compaction, JournalStore, SessionStore};
use uuid::Uuid;

/// Sessions compacted per round of a sweep.
const BATCH: u32 = 100;

/// Compacts every ended session last changed more than `days` ago, calling `progress` after
/// each. A session that cannot be compacted now (it changed meanwhile, or its journal holds an
/// event this Stead cannot read) is logged and skipped.
pub async fn sweep(
    store: &dyn SessionStore,
    days: u64,
    mut progress: impl FnMut(Uuid, &Value),
) -> anyhow::Result<Vec<Compaction>> {
    let cutoff = chrono::Utc::now() - chrono::Duration::days(days.min(100_000) as i64);
    let mut done: Vec<Compaction> = Vec::new();
    let mut after = None;
    loop {
        let candidates = store.compaction_candidates(cutoff, after, BATCH).await?;
        let Some(&(last_id, last_time)) = candidates.last() else {
            return Ok(done);
        };
        after = Some((last_time, last_id));
        for (id, _) in candidates {
            match replay::compact(store, id).await {
                Ok(compaction) => {
                    progress(id, &compaction.summary);
                    done.push(compaction);
                }
                // Left for the next sweep; paging moves past it.
                Err(error) => tracing::warn!(session = %id, %error, "compaction skipped"),
            }
        }
    }
}

/// The server's retention task: a sweep every `every`, for as long as the server runs.
pub async fn run(store: Arc<dyn JournalStore>, days: u64, every: Duration) {
    let mut ticks = tokio::time::interval(every.max(Duration::from_secs(1)));
    loop {
        ticks.tick().await;
        match sweep(store.as_ref(), days, |_, _| {}).await {
            Ok(done) if !done.is_empty() => {
                tracing::info!(sessions = done.len(), "compacted ended journals")
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "retention sweep failed"),
        }
    }
}

/// The audit trail's retention (docs/audit.md): once a day (and at start), acts older than
/// `days` are removed.
pub async fn prune_audit(store: Arc<dyn JournalStore>, days: u64) {
    let mut ticks = tokio::time::interval(Duration::from_secs(86_400));
    loop {
        ticks.tick().await;
        let cutoff = chrono::Utc::now() - chrono::Duration::days(days.min(100_000) as i64);
        match store.prune_audit(cutoff).await {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "audit acts past their retention removed"),
            Err(error) => tracing::warn!(%error, "audit retention failed"),
        }
    }
}

/// Starts the server's retention tasks: the journals' sweep (when `sessions.keep_journal_days`
/// is set) and the audit trail's (unless `audit.retention_days` is 0).
pub fn start(config: &stead_config::Config, store: &Arc<dyn JournalStore>) {
    if let Some(days) = config.sessions.keep_journal_days {
        tokio::spawn(run(
            store.clone(),
            days,
            Duration::from_secs(config.sessions.retention_sweep_secs),
        ));
    }
    if config.audit.retention_days > 0 {
        tokio::spawn(prune_audit(store.clone(), config.audit.retention_days));
    }
}

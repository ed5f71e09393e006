//! `stead bench sessions`, parked sessions (turns waiting for a person's approval): what each
//! costs as the product keeps them (passivated after `passivate_parked_after`) and as live
//! actors, and how fast a decision's re-activation is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use stead_actors::session::{Lifecycle, SessionRegistry};
use stead_actors::SessionEvent;
use stead_persistence::{JournalStore, NewEvent, NewSession};

use crate::sessions::{agent, finished_call, InstantModel};

/// The targets for a parked session (docs/benchmarks.md).
const PARKED_KIB: f64 = 2.0;
const REACTIVATION_P99_MS: f64 = 5.0;

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Activates every session of `ids` (each is parked: its activation folds its journal).
async fn activate_all(registry: &SessionRegistry, ids: &[uuid::Uuid]) -> anyhow::Result<()> {
    for (i, id) in ids.iter().enumerate() {
        let state = registry.state(*id).await?;
        anyhow::ensure!(
            state.status() == stead_persistence::SessionStatus::AwaitingApproval,
            "session {id} is not parked"
        );
        if i % 5000 == 0 {
            eprint!("\r  activating: {i}/{}", ids.len());
        }
    }
    Ok(())
}

/// Creates `count` parked sessions and measures them three ways (docs/benchmarks.md).
pub(crate) async fn parked(store: &Arc<dyn JournalStore>, count: usize) -> anyhow::Result<()> {
    eprintln!("creating {count} parked sessions…");
    let started = Instant::now();
    let ids = create_parked(store, count).await?;
    eprintln!("\r  created in {:.1} s", started.elapsed().as_secs_f64());
    let registry_with = |passivate_parked_after| {
        SessionRegistry::new(store.clone(), Arc::new(InstantModel), vec![agent()]).with_lifecycle(
            Lifecycle {
                passivate_after: Duration::from_secs(3600),
                passivate_parked_after,
                ..Lifecycle::default()
            },
        )
    };

    // 1. As the product keeps them: each passivates `passivate_parked_after` after its
    //    activation (1 s here; 10 s by default), so only the last second's are live at once.
    //    The first half, then the second: what the second half adds once passivated is the
    //    memory a parked session keeps (the first half's peak — the actors live during its
    //    last second, the allocator's retained pages, the database's page caches — is paid
    //    once and reused).
    let base_rss = rss_bytes();
    let registry = registry_with(Duration::from_secs(1));
    let started = Instant::now();
    let (first, second) = ids.split_at(ids.len() / 2);
    let mut held = Vec::new();
    for half in [first, second] {
        activate_all(&registry, half).await?;
        let mut waited = 0;
        while registry.prune() > 0 && waited < 600 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += 1;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        held.push(rss_bytes());
    }
    let activated_in = started.elapsed().as_secs_f64();
    let still_live = registry.prune();
    drop(registry);
    let held_rss = held[1];
    let per_parked = held[1].saturating_sub(held[0]) as f64 / 1024.0 / second.len().max(1) as f64;

    // 2. As live actors, all at once (no passivation during the measurement): what one
    //    live parked actor costs.
    let registry = registry_with(Duration::from_secs(3600));
    let live_base = rss_bytes();
    let started = Instant::now();
    activate_all(&registry, &ids).await?;
    let activate_live = started.elapsed().as_secs_f64();
    let live_rss = rss_bytes();
    let live = ids.iter().filter(|id| registry.is_live(**id)).count();
    eprintln!("\r  {live} parked actors live; stopping them…");
    registry.stop_all();
    tokio::time::sleep(Duration::from_secs(2)).await;
    registry.prune();

    // 3. A decision's re-activation of a passivated parked session, timed.
    let mut reactivation = Histogram::<u64>::new(3)?;
    for id in ids.iter().take(1_000) {
        let started = Instant::now();
        registry.state(*id).await?;
        reactivation.record(started.elapsed().as_micros() as u64)?;
    }
    registry.stop_all();

    println!("parked sessions (SQLite, scripted model)");
    println!(
        "  as the product keeps them ({} parked, passivate_parked_after 1 s, activated in {activated_in:.1} s): {} still live; RSS {:.0} MiB over a {:.0} MiB base ({:.0} MiB after the first half); the second half's {} added {per_parked:.2} KiB per parked session; target ≤ {PARKED_KIB} KiB ({:.2}× the target)",
        ids.len(),
        still_live,
        mib(held_rss),
        mib(base_rss),
        mib(held[0]),
        second.len(),
        per_parked / PARKED_KIB
    );
    let per_live = live_rss.saturating_sub(live_base) as f64 / 1024.0 / live.max(1) as f64;
    println!(
        "  as live actors, {live} of {} at once: RSS {:.0} MiB over {:.0} MiB = {per_live:.2} KiB per live parked actor (activated in {activate_live:.1} s)",
        ids.len(),
        mib(live_rss),
        mib(live_base)
    );
    let p99 = reactivation.value_at_quantile(0.99) as f64 / 1e3;
    println!(
        "  re-activation of a passivated parked session ({} timed): p50 {:.2} ms · p99 {p99:.2} ms; target p99 ≤ {REACTIVATION_P99_MS} ms ({:.2}× the target)",
        reactivation.len(),
        reactivation.value_at_quantile(0.5) as f64 / 1e3,
        p99 / REACTIVATION_P99_MS
    );
    Ok(())
}

/// `parked` sessions, each with a turn parked on an approval (journaled directly).
async fn create_parked(
    store: &Arc<dyn JournalStore>,
    parked: usize,
) -> anyhow::Result<Vec<uuid::Uuid>> {
    let mut ids = Vec::with_capacity(parked);
    let mut pending = Vec::new();
    for i in 0..parked {
        let id = store
            .create_session(NewSession::for_agent("bench"))
            .await?
            .id;
        ids.push(id);
        let store = store.clone();
        pending.push(tokio::spawn(async move {
            store.append(id, 0, parked_turn()).await
        }));
        if pending.len() >= 256 {
            for task in pending.drain(..) {
                task.await??;
            }
            eprint!("\r  progress: {}/{} sessions", i + 1, parked);
        }
    }
    for task in pending.drain(..) {
        task.await??;
    }
    Ok(ids)
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

/// A parked turn: the model asked for a tool that waits for approval.
fn parked_turn() -> Vec<NewEvent> {
    let events = [
        SessionEvent::UserMessage {
            text: "delete the old rows".into(),
            client_id: None,
            mode: None,
            schedule: None,
            attachments: Vec::new(),
        },
        SessionEvent::ModelCallStarted {
            call_id: "m1".into(),
            route: "default".into(),
            model: "default".into(),
        },
        finished_call(
            "m1".into(),
            String::new(),
            vec![stead_actors::RequestedCall {
                call_id: "t1".into(),
                tool: "delete_records".into(),
                arguments: json!({"table": "events"}),
            }],
            40,
        ),
        SessionEvent::ToolCallRequested {
            call_id: "t1".into(),
            tool: "delete_records".into(),
            arguments: json!({"table": "events"}),
        },
        SessionEvent::ApprovalRequested {
            call_id: "t1".into(),
            tool: "delete_records".into(),
            arguments: json!({"table": "events"}),
            args_hash: stead_actors::args_hash(&json!({"table": "events"})),
            reason: "this tool always needs approval".into(),
        },
    ];
    events
        .iter()
        .map(|e| {
            let (k, p) = e.to_parts();
            NewEvent::new(k, p)
        })
        .collect()
}

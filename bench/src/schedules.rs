//! `stead bench schedules`: many pending schedules over many sessions, fired by the real
//! scheduler through real session actors (a scripted model answers each firing's turn at once).
//! Per offered rate: how late firings are (lag: the `schedule_fired` event's journal time minus
//! its occurrence's due time), whether every due occurrence fired once (duplicates must be 0),
//! the process's memory, and its CPU while every schedule is pending and none is due.
//!
//! The schedules are `every_secs` with one period for all (schedules ÷ rate) and first due
//! times spread evenly over it, written straight into the journals and the due index (the
//! firing is what is measured). They are created on a timeline that starts a day ahead; the
//! scheduler's clock is shifted so that the first one falls due right after the idle window.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hdrhistogram::Histogram;
use serde_json::json;
use stead_actors::session::{Scheduler, SchedulerOptions, SessionRegistry};
use stead_actors::{CatchUp, ScheduleDef, ScheduleMessage, SessionEvent};
use stead_persistence::{
    DatabaseUrl, JournalStore, NewEvent, NewSession, ScheduleOwner, ScheduleRow, StoreOptions,
};
use uuid::Uuid;

use super::sessions::{agent, InstantModel};
use super::{process_cpu, process_memory, BenchDatabase};
use crate::cli::SchedulesBenchArgs;
use stead_config::Config;

/// How long the scheduler keeps running after the measured window.
const GRACE_SECS: u64 = 2;

pub async fn schedules(config: Config, args: SchedulesBenchArgs) -> anyhow::Result<()> {
    let mut results = Vec::new();
    for &rate in &args.rates {
        anyhow::ensure!(rate > 0.0, "rates must be positive");
        let db = BenchDatabase::create(&config, args.backend).await?;
        let result = run(&db.url, &args, rate).await;
        db.remove().await?;
        let result = result?;
        if !args.json {
            print(&result);
        }
        results.push(result);
    }
    if args.json {
        println!(
            "{}",
            json!({ "backend": format!("{:?}", args.backend).to_lowercase(), "results": results })
        );
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct RateResult {
    schedules: usize,
    sessions: usize,
    period_secs: u64,
    /// schedules ÷ period.
    offered_per_sec: f64,
    setup_secs: f64,
    /// Occurrences due in the measured window, and how many of them fired.
    due: u64,
    fired: u64,
    fired_per_sec: f64,
    /// The same occurrence journaled twice (must be 0).
    duplicates: u64,
    /// Firings that stood for missed occurrences (`catch_up = "one"` under overload).
    late_merged: u64,
    lag_p50_ms: f64,
    lag_p99_ms: f64,
    lag_max_ms: f64,
    turns_finished: u64,
    idle_cpu_percent: f64,
    rss_idle_mib: f64,
    rss_end_mib: f64,
    peak_rss_mib: f64,
    live_sessions_end: usize,
}

fn print(r: &RateResult) {
    println!(
        "{} schedules over {} sessions, every {} s (offered {:.0}/s; setup {:.1} s)",
        r.schedules, r.sessions, r.period_secs, r.offered_per_sec, r.setup_secs
    );
    println!(
        "  due {} · fired {} ({:.0}/s) · duplicates {} · merged late {} · turns finished {}",
        r.due, r.fired, r.fired_per_sec, r.duplicates, r.late_merged, r.turns_finished
    );
    println!(
        "  lag p50 {:.0} ms · p99 {:.0} ms · max {:.0} ms",
        r.lag_p50_ms, r.lag_p99_ms, r.lag_max_ms
    );
    println!(
        "  idle CPU {:.1}% · RSS idle {:.0} MiB, end {:.0} MiB, peak {:.0} MiB · live sessions at the end {}",
        r.idle_cpu_percent, r.rss_idle_mib, r.rss_end_mib, r.peak_rss_mib, r.live_sessions_end
    );
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

async fn run(
    url: &DatabaseUrl,
    args: &SchedulesBenchArgs,
    rate: f64,
) -> anyhow::Result<RateResult> {
    let store = stead_persistence::open(StoreOptions::new(url.clone())).await?;
    let sessions = args.sessions.max(1);
    let per = (args.schedules / sessions).max(1);
    let total = per * sessions;
    let period = ((total as f64 / rate).round() as u64).max(1);
    // The nominal timeline: the first occurrence is due at `start`.
    let start = Utc::now() + chrono::Duration::days(1);
    let setup = Instant::now();
    eprintln!("writing {total} schedules over {sessions} sessions (every {period} s)…");
    let ids = write_schedules(&store, sessions, per, period, start).await?;
    let setup_secs = setup.elapsed().as_secs_f64();

    let registry = SessionRegistry::new(store.clone(), Arc::new(InstantModel), vec![agent()]);
    // Wall clock + offset = the nominal timeline, with `start` right after the idle window.
    let offset = start - (Utc::now() + chrono::Duration::seconds(args.idle as i64));
    let clock = Arc::new(move || Utc::now() + offset);
    let scheduler = Scheduler::new(
        registry.clone(),
        SchedulerOptions {
            clock,
            ..Default::default()
        },
    )
    .spawn();

    let pid = std::process::id();
    let cpu_before = process_cpu(pid);
    tokio::time::sleep(Duration::from_secs(args.idle)).await;
    let idle_cpu = process_cpu(pid).saturating_sub(cpu_before);
    let (rss_idle, _) = process_memory(pid);
    eprintln!("firing for {} s…", args.seconds);
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let end = start + chrono::Duration::seconds(args.seconds as i64);
    // Occurrences due before the end still fire (late ones count with their lag); then the
    // turns of the last firings finish.
    tokio::time::sleep(Duration::from_secs(GRACE_SECS)).await;
    scheduler.abort();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss_end, peak) = process_memory(pid);
    let live = registry.live_count();
    registry.stop_all();

    eprintln!("reading {} journals…", ids.len());
    let mut lags = Histogram::<u64>::new_with_bounds(1, 3_600_000, 3)?;
    let mut seen = HashSet::new();
    let (mut fired, mut duplicates, mut merged, mut turns) = (0u64, 0u64, 0u64, 0u64);
    for id in &ids {
        let mut after = 0;
        loop {
            let page = store.read(*id, after, 1000).await?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            for event in &page {
                match event.kind.as_str() {
                    "turn_finished" => turns += 1,
                    "schedule_fired" => {
                        let key = event.payload["key"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string();
                        let due_at: DateTime<Utc> =
                            serde_json::from_value(event.payload["due_at"].clone())?;
                        if !seen.insert((*id, key, due_at)) {
                            duplicates += 1;
                        }
                        if due_at >= end {
                            continue;
                        }
                        fired += 1;
                        merged += u64::from(event.payload["missed"].as_u64().unwrap_or(0) > 0);
                        let lag = (event.created_at + offset - due_at).num_milliseconds();
                        lags.saturating_record(lag.max(1) as u64);
                    }
                    _ => {}
                }
            }
        }
    }
    store.shutdown().await;
    let due = due_in_window(total, period, args.seconds);
    Ok(RateResult {
        schedules: total,
        sessions,
        period_secs: period,
        offered_per_sec: total as f64 / period as f64,
        setup_secs,
        due,
        fired,
        fired_per_sec: fired as f64 / args.seconds as f64,
        duplicates,
        late_merged: merged,
        lag_p50_ms: lags.value_at_quantile(0.5) as f64,
        lag_p99_ms: lags.value_at_quantile(0.99) as f64,
        lag_max_ms: lags.max() as f64,
        turns_finished: turns,
        idle_cpu_percent: 100.0 * idle_cpu.as_secs_f64() / args.idle.max(1) as f64,
        rss_idle_mib: mib(rss_idle),
        rss_end_mib: mib(rss_end),
        peak_rss_mib: mib(peak),
        live_sessions_end: live,
    })
}

/// The first due time of schedule `g` of `total`: spread evenly over the period from `start`.
fn first_due(g: usize, total: usize, period: u64, start: DateTime<Utc>) -> DateTime<Utc> {
    let micros = (g as u128 * period as u128 * 1_000_000 / total as u128) as i64;
    start + chrono::Duration::microseconds(micros)
}

/// Occurrences due in `[start, start + seconds)`.
fn due_in_window(total: usize, period: u64, seconds: u64) -> u64 {
    let window = seconds as u128 * 1_000_000;
    (0..total)
        .map(|g| {
            let first = g as u128 * period as u128 * 1_000_000 / total as u128;
            if first >= window {
                0
            } else {
                ((window - first - 1) / (period as u128 * 1_000_000) + 1) as u64
            }
        })
        .sum()
}

/// Sessions of the bench agent, each with `per` schedules journaled as `schedule_created` and
/// indexed in the due index.
async fn write_schedules(
    store: &Arc<dyn JournalStore>,
    sessions: usize,
    per: usize,
    period: u64,
    start: DateTime<Utc>,
) -> anyhow::Result<Vec<Uuid>> {
    let total = sessions * per;
    let mut ids = Vec::with_capacity(sessions);
    let mut tasks = tokio::task::JoinSet::new();
    let mut rows = Vec::new();
    let mut written = 0usize;
    for i in 0..sessions {
        let id = store
            .create_session(NewSession::for_agent("bench"))
            .await?
            .id;
        ids.push(id);
        let mut events = vec![SessionEvent::SessionCreated {
            agent: "bench".into(),
            principal: None,
            parent: None,
        }];
        for j in 0..per {
            let g = i + j * sessions; // a session's schedules are spread over the period
            let due = first_due(g, total, period, start);
            let def = ScheduleDef {
                at: None,
                delay_secs: None,
                cron: None,
                tz: None,
                every_secs: Some(period),
                message: ScheduleMessage::text(format!("scheduled check {j}")),
                catch_up: CatchUp::One,
            };
            rows.push(ScheduleRow {
                owner: ScheduleOwner::Session(id),
                key: format!("check-{j}"),
                agent: "bench".into(),
                definition: serde_json::to_value(&def)?,
                next_due_at: due,
                updated_at: due,
            });
            events.push(SessionEvent::ScheduleCreated {
                key: format!("check-{j}"),
                schedule: def,
                created_at: due - chrono::Duration::seconds(period as i64),
                next_due_at: Some(due),
            });
        }
        let events: Vec<NewEvent> = events
            .iter()
            .map(|e| {
                let (kind, payload) = e.to_parts();
                NewEvent::new(kind, payload)
            })
            .collect();
        let writer = store.clone();
        tasks.spawn(async move { writer.append(id, 0, events).await.map(|_| ()) });
        while tasks.len() >= 64 {
            if let Some(done) = tasks.join_next().await {
                done??;
            }
        }
        if rows.len() >= 500 {
            store.put_schedules(&rows).await?;
            written += rows.len();
            rows.clear();
        }
        if (i + 1) % 1000 == 0 {
            eprintln!("  {} sessions, {written} schedules indexed", i + 1);
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    store.put_schedules(&rows).await?;
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occurrences_in_the_window_are_counted_from_the_spread_first_due_times() {
        // 4 schedules every 2 s: first due at 0, 0.5, 1, 1.5 s; in 3 s: 2 + 2 + 1 + 1.
        assert_eq!(due_in_window(4, 2, 3), 6);
        assert_eq!(due_in_window(4, 2, 2), 4);
        let start = Utc::now();
        assert_eq!(
            first_due(2, 4, 2, start),
            start + chrono::Duration::seconds(1)
        );
    }
}

//! `stead bench journal`: append throughput and latency of the durable journal.
//!
//! N sessions append concurrently, one event per append, each waiting for its commit before the
//! next (as a session actor does). Every append is durable when it returns. A progress line is
//! printed on stderr while it runs; the result goes to stdout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use stead_persistence::{JournalStore, NewEvent, NewSession, StoreOptions};

use crate::cli::{BenchBackend, JournalBenchArgs};
use crate::BenchDatabase;
use stead_config::Config;

/// What one run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JournalBenchResult {
    pub backend: String,
    pub sessions: usize,
    pub events_per_session: usize,
    pub payload_bytes: usize,
    pub steps: u64,
    pub seconds: f64,
    pub steps_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The same rows written straight into the engine with perfect batching (rows/s), in the
    /// same run; `None` with `--no-baseline`.
    pub raw_rows_per_sec: Option<f64>,
    /// `steps_per_sec / raw_rows_per_sec`.
    pub share_of_raw: Option<f64>,
    /// PostgreSQL: the journal's writers (connections) in this run.
    pub journal_writers: usize,
    /// PostgreSQL with more than one writer: the raw baseline on that many connections at once
    /// (rows/s), and `steps_per_sec` as a share of it.
    pub raw_parallel_rows_per_sec: Option<f64>,
    pub share_of_raw_parallel: Option<f64>,
    /// SQLite only: the same rows through SQLite's C API (`rusqlite`), rows/s, and
    /// `steps_per_sec` as a share of it.
    pub c_api_rows_per_sec: Option<f64>,
    pub share_of_c_api: Option<f64>,
    /// Transactions the journal committed, and appends per commit (how well group commit
    /// batched).
    pub commits: u64,
    pub appends_per_commit: f64,
}

pub async fn journal(config: Config, args: JournalBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.sessions > 0, "--sessions must be at least 1");
    anyhow::ensure!(args.events > 0, "--events must be at least 1");
    let database = BenchDatabase::create(&config, args.backend).await?;
    let mut options = StoreOptions::new(database.url.clone());
    options.max_event_bytes = config.database.max_event_bytes;
    options.max_connections = config.database.max_connections;
    options.journal_writers = args.journal_writers.max(1);
    let outcome = async {
        let store = stead_persistence::open(options).await?;
        let result = run(store.clone(), &args).await;
        store.shutdown().await;
        result
    }
    .await;
    database.remove().await?;
    let mut result = outcome?;
    if !args.no_baseline {
        eprintln!("  raw baseline: the same rows straight into the engine…");
        let raw_db = BenchDatabase::create(&config, args.backend).await?;
        let raw = super::journal_raw::raw_rows_per_sec(
            &raw_db.url,
            args.sessions,
            args.events,
            args.payload_bytes,
        )
        .await;
        raw_db.remove().await?;
        let raw = raw?;
        result.raw_rows_per_sec = Some(raw);
        result.share_of_raw = Some(result.steps_per_sec / raw);
        if args.backend == BenchBackend::Postgres && args.journal_writers > 1 {
            eprintln!(
                "  raw baseline on {} connections at once…",
                args.journal_writers
            );
            let raw_db = BenchDatabase::create(&config, args.backend).await?;
            let stead_persistence::DatabaseUrl::Postgres(url) = &raw_db.url else {
                anyhow::bail!("not a PostgreSQL database");
            };
            let raw = super::journal_raw::pg_rows_per_sec_on(
                url,
                args.sessions,
                args.events,
                args.payload_bytes,
                args.journal_writers,
            )
            .await;
            raw_db.remove().await?;
            let raw = raw?;
            result.raw_parallel_rows_per_sec = Some(raw);
            result.share_of_raw_parallel = Some(result.steps_per_sec / raw);
        }
        if let BenchBackend::Sqlite = args.backend {
            eprintln!("  C-API baseline: the same rows through rusqlite…");
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("c-api.db");
            let (sessions, rounds, bytes) = (args.sessions, args.events, args.payload_bytes);
            let rows = tokio::task::spawn_blocking(move || {
                super::journal_raw::c_api_rows_per_sec(&path, sessions, rounds, bytes)
            })
            .await??;
            result.c_api_rows_per_sec = Some(rows);
            result.share_of_c_api = Some(result.steps_per_sec / rows);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string(&result)?);
    } else {
        println!(
            "journal bench: backend {} · {} sessions × {} appends · {} B payload text",
            result.backend, result.sessions, result.events_per_session, result.payload_bytes
        );
        println!(
            "  {} steps in {:.2} s = {:.0} steps/s",
            result.steps, result.seconds, result.steps_per_sec
        );
        println!(
            "  append latency: p50 {:.3} ms · p99 {:.3} ms · max {:.3} ms",
            result.p50_ms, result.p99_ms, result.max_ms
        );
        println!(
            "  group commit: {} commits, {:.1} appends per commit",
            result.commits, result.appends_per_commit
        );
        if let (Some(raw), Some(share)) = (result.raw_rows_per_sec, result.share_of_raw) {
            println!(
                "  raw baseline (same rows, one multi-row INSERT per commit): {raw:.0} rows/s · Stead reaches {:.0} % of it",
                share * 100.0
            );
        }
        if let (Some(raw), Some(share)) = (
            result.raw_parallel_rows_per_sec,
            result.share_of_raw_parallel,
        ) {
            println!(
                "  raw baseline on {} connections at once (as many as the journal's writers): {raw:.0} rows/s · Stead reaches {:.0} % of it",
                result.journal_writers,
                share * 100.0
            );
        }
        if let (Some(rows), Some(share)) = (result.c_api_rows_per_sec, result.share_of_c_api) {
            println!(
                "  C-API baseline (rusqlite, same rows and pragmas, one transaction per round): {rows:.0} rows/s · Stead reaches {share:.2}× of it (target ≥ 0.6×)"
            );
        }
    }
    Ok(())
}

async fn run(
    store: Arc<dyn JournalStore>,
    args: &JournalBenchArgs,
) -> anyhow::Result<JournalBenchResult> {
    let mut ids = Vec::with_capacity(args.sessions);
    for _ in 0..args.sessions {
        ids.push(
            store
                .create_session(NewSession::for_agent("bench"))
                .await?
                .id,
        );
    }
    let text = "x".repeat(args.payload_bytes);
    let total = (args.sessions * args.events) as u64;
    let done = Arc::new(AtomicU64::new(0));
    let before = store.journal_stats();
    let started = Instant::now();
    let progress = tokio::spawn(report_progress(done.clone(), total, started));

    let mut tasks = Vec::with_capacity(ids.len());
    for id in ids.iter().copied() {
        let store = store.clone();
        let done = done.clone();
        let text = text.clone();
        let events = args.events;
        tasks.push(tokio::spawn(async move {
            let mut latencies = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram");
            for seq in 0..events as i64 {
                let event = NewEvent::new(
                    "model_call_finished",
                    json!({ "call_id": format!("c{seq}"), "text": text, "usage": { "prompt_tokens": 37, "completion_tokens": 64 } }),
                );
                let t0 = Instant::now();
                store.append(id, seq, vec![event]).await?;
                latencies.saturating_record(t0.elapsed().as_micros() as u64);
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram");
    for task in tasks {
        latencies.add(task.await??)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = store.journal_stats();
    let commits = after.commits - before.commits;
    progress.abort();
    eprintln!();

    // The journal must hold exactly what was acknowledged.
    for id in &ids {
        let events = store.read(*id, 0, args.events as u32 + 1).await?;
        anyhow::ensure!(
            events.len() == args.events
                && events
                    .iter()
                    .enumerate()
                    .all(|(i, e)| e.seq == i as i64 + 1),
            "session {id}: journal does not hold the {} acknowledged events",
            args.events
        );
    }
    let ms = |micros: u64| micros as f64 / 1e3;
    Ok(JournalBenchResult {
        backend: store.backend().to_string(),
        sessions: args.sessions,
        events_per_session: args.events,
        payload_bytes: args.payload_bytes,
        steps: total,
        seconds,
        steps_per_sec: total as f64 / seconds,
        p50_ms: ms(latencies.value_at_quantile(0.50)),
        p99_ms: ms(latencies.value_at_quantile(0.99)),
        max_ms: ms(latencies.max()),
        raw_rows_per_sec: None,
        c_api_rows_per_sec: None,
        share_of_c_api: None,
        share_of_raw: None,
        journal_writers: match args.backend {
            BenchBackend::Postgres => args.journal_writers.max(1),
            BenchBackend::Sqlite => 1,
        },
        raw_parallel_rows_per_sec: None,
        share_of_raw_parallel: None,
        commits,
        appends_per_commit: (after.appends - before.appends) as f64 / commits.max(1) as f64,
    })
}

async fn report_progress(done: Arc<AtomicU64>, total: u64, started: Instant) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let n = done.load(Ordering::Relaxed);
        let rate = n as f64 / started.elapsed().as_secs_f64().max(1e-9);
        eprint!("\r  progress: {n}/{total} steps ({rate:.0} steps/s)   ");
    }
}

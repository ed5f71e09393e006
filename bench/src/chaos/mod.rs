//! `stead bench chaos`: SIGKILLs of the real `stead serve` process at random moments of a
//! mixed workload, on SQLite or PostgreSQL, each restart checked (docs/benchmarks.md).
//!
//! The server is this binary run as `stead serve` (a child process, killed with SIGKILL and
//! started again on the same data directory, database and port). Its model and its webhooks are
//! doubles inside the bench process, which is never killed, so the effects they counted
//! survive every kill. Clients (`workload`) stream turns, call idempotent and non-idempotent
//! webhooks, decide approvals over REST and WebSocket, cancel, fork and close; after each
//! restart they pause and `check` judges every session they touched. With `--tally FILE` the
//! counts of many runs add up, so that a thousand kills can be reached over several runs.
//! With `--nodes N` (PostgreSQL) the server is a cluster of N nodes (`servers`): clients pick a
//! node per request and each fault kills the node holding the most sessions.

mod abuse;
mod check;
pub(crate) mod doubles;
mod servers;
mod workload;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::cli::{BenchBackend, ChaosBenchArgs, ChaosFault};
use crate::BenchDatabase;
use check::Checked;
use servers::Servers;
use stead_config::prepare_data_dir;
use stead_config::Config;
use workload::{Counts, Shared};

/// Every this many kills, the check covers every session of the run, not only those touched.
const FULL_CHECK_EVERY: usize = 25;
/// Violations kept in the tally file (all are printed as they are found).
const KEEP_VIOLATIONS: usize = 20;

/// What runs add up to, per backend.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Totals {
    runs: u64,
    kills: u64,
    acknowledged: Counts,
    checked: Checked,
    violations: u64,
    first_violations: Vec<String>,
    /// Longest time from a restart to `/readyz` answering 200, milliseconds.
    max_ready_ms: u64,
    /// What clients were answered with 500 and above (see `workload::Ledger`).
    #[serde(default)]
    server_errors: std::collections::BTreeMap<String, u64>,
    /// The first answers of 500 and above other than 503, with their requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unexpected_errors: Vec<String>,
    /// With `--fault none`: one row per window (not added up across runs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    windows: Vec<Window>,
    /// With `--abuse`: what the attackers were answered, by `attack status`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    abuse: BTreeMap<String, u64>,
}

/// A soak window: the server process and the clients' requests in it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Window {
    /// Seconds since the start of the run, at the end of the window.
    at_s: u64,
    rss_mib: f64,
    open_files: usize,
    requests: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

impl Window {
    fn line(&self) -> String {
        format!(
            "at {:>5} s: RSS {:.1} MiB, {} open files, {} requests, p50 {:.2} ms, p99 {:.2} ms, \
             max {:.1} ms",
            self.at_s,
            self.rss_mib,
            self.open_files,
            self.requests,
            self.p50_ms,
            self.p99_ms,
            self.max_ms
        )
    }
}

/// The window that just ended.
fn window(shared: &Shared, child: &Child, elapsed: Duration) -> Window {
    let (rss, _) = crate::process_memory(child.id());
    let open_files = std::fs::read_dir(format!("/proc/{}/fd", child.id()))
        .map(|d| d.count())
        .unwrap_or(0);
    let latency = shared.take_latency();
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    Window {
        at_s: elapsed.as_secs(),
        rss_mib: rss as f64 / f64::from(1 << 20),
        open_files,
        requests: latency.len(),
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        max_ms: latency.max() as f64 / 1000.0,
    }
}

/// Polls `/readyz` (not through the clients' tallies) and sets `seen` at its first 503.
async fn watch_readiness(shared: Arc<Shared>, seen: Arc<AtomicBool>) {
    loop {
        if servers::readyz(&shared.http, shared.base()).await
            == Some(reqwest::StatusCode::SERVICE_UNAVAILABLE)
        {
            seen.store(true, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Totals {
    fn add(&mut self, run: &Totals) {
        self.runs += run.runs;
        self.kills += run.kills;
        self.acknowledged.add(run.acknowledged);
        self.checked.add(run.checked);
        self.violations += run.violations;
        for v in &run.first_violations {
            if self.first_violations.len() < KEEP_VIOLATIONS {
                self.first_violations.push(v.clone());
            }
        }
        self.max_ready_ms = self.max_ready_ms.max(run.max_ready_ms);
        for (key, n) in &run.server_errors {
            *self.server_errors.entry(key.clone()).or_default() += n;
        }
        for e in &run.unexpected_errors {
            if self.unexpected_errors.len() < KEEP_VIOLATIONS {
                self.unexpected_errors.push(e.clone());
            }
        }
    }
}

pub async fn chaos(config: Config, args: ChaosBenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.kills > 0, "--kills must be at least 1");
    anyhow::ensure!(
        args.fault != ChaosFault::DiskFull || args.backend == BenchBackend::Sqlite,
        "--fault disk-full fills the data directory's filesystem: it needs --backend sqlite"
    );
    anyhow::ensure!(
        args.fault != ChaosFault::DbRestart
            || (args.backend == BenchBackend::Postgres && args.db_restart_command.is_some()),
        "--fault db-restart needs --backend postgres and --db-restart-command"
    );
    anyhow::ensure!(args.clients > 0, "--clients must be at least 1");
    anyhow::ensure!(
        args.nodes == 1
            || (args.nodes > 1
                && args.backend == BenchBackend::Postgres
                && matches!(args.fault, ChaosFault::Kill | ChaosFault::None)),
        "--nodes: a cluster (more than one node) needs --backend postgres and --fault kill or none"
    );
    anyhow::ensure!(
        args.min_up_ms <= args.max_up_ms,
        "--min-up-ms must not exceed --max-up-ms"
    );
    anyhow::ensure!(
        !args.abuse || (args.fault == ChaosFault::None && args.nodes == 1),
        "--abuse runs beside a soak: it needs --fault none and one node"
    );
    prepare_data_dir(&config.server.data_dir)?;
    let database = BenchDatabase::create(&config, args.backend).await?;
    let dir = config
        .server
        .data_dir
        .join(format!("bench-chaos-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    let url = database.url_text();
    let result = run(&dir, &url, &args).await;
    if result.as_ref().is_ok_and(|run| run.violations == 0) {
        let _ = std::fs::remove_dir_all(&dir);
        database.remove().await?;
    } else {
        // Kept for a post-mortem (`stead session show ID --database-url …`).
        eprintln!(
            "chaos: the server's data and log are kept in {}, its database at {}",
            dir.display(),
            database.url.redacted()
        );
    }
    let run = result?;
    let single = match (args.backend, args.fault) {
        (BenchBackend::Sqlite, ChaosFault::Kill) => "sqlite",
        (BenchBackend::Postgres, ChaosFault::Kill) => "postgres",
        (_, ChaosFault::DiskFull) => "sqlite-disk-full",
        (_, ChaosFault::DbRestart) => "postgres-restart",
        (BenchBackend::Sqlite, ChaosFault::None) if args.abuse => "sqlite-abuse",
        (BenchBackend::Postgres, ChaosFault::None) if args.abuse => "postgres-abuse",
        (BenchBackend::Sqlite, ChaosFault::None) => "sqlite-soak",
        (BenchBackend::Postgres, ChaosFault::None) => "postgres-soak",
    };
    let backend = if args.nodes > 1 {
        format!("{single}-cluster-{}", args.nodes)
    } else {
        single.to_string()
    };
    let backend = backend.as_str();
    let total = match &args.tally {
        Some(file) => Some(add_to_tally(file, backend, &run)?),
        None => None,
    };
    if args.json {
        println!(
            "{}",
            json!({ "backend": backend, "run": run, "total": total })
        );
    } else {
        print_totals(&format!("this run ({backend})"), &run);
        if let Some(total) = &total {
            print_totals(&format!("all runs in the tally ({backend})"), total);
        }
    }
    Ok(if run.violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_totals(title: &str, t: &Totals) {
    let (a, c) = (t.acknowledged, t.checked);
    println!("{title}: {} runs, {} faults", t.runs, t.kills);
    println!(
        "  acknowledged: {} sessions, {} messages over REST and {} over WebSocket, {} approvals \
         over REST and {} over WebSocket, {} cancels, {} forks, {} closes ({} steps failed: no \
         answer, or an error status)",
        a.sessions,
        a.messages_rest,
        a.messages_ws,
        a.approvals_rest,
        a.approvals_ws,
        a.cancels,
        a.forks,
        a.closes,
        a.unanswered
    );
    println!(
        "  checked: {} session checks, {} events, {} acknowledgements at their seq; effects: {} \
         idempotent delivered with their key ({} of them more than once: after a kill, or carried on in a fork made mid-call), {} non-idempotent \
         exactly once, {} left in doubt; slowest restart to ready {} ms; longest from a fault \
         to every session checked settled {} ms",
        c.sessions,
        c.events,
        c.acks,
        c.idempotent_effects,
        c.idempotent_reruns,
        c.non_idempotent_effects,
        c.in_doubt,
        t.max_ready_ms,
        c.max_settle_ms
    );
    if !t.server_errors.is_empty() {
        let errors: Vec<String> = t
            .server_errors
            .iter()
            .map(|(key, n)| format!("{n}× {key}"))
            .collect();
        println!("  server errors answered: {}", errors.join(", "));
    }
    for w in &t.windows {
        println!("  {}", w.line());
    }
    if !t.abuse.is_empty() {
        let answered: Vec<String> = t.abuse.iter().map(|(k, n)| format!("{n}× {k}")).collect();
        println!("  attackers were answered: {}", answered.join(", "));
    }
    println!("  violations: {}", t.violations);
    for v in &t.first_violations {
        println!("    {v}");
    }
}

fn add_to_tally(file: &Path, backend: &str, run: &Totals) -> anyhow::Result<Totals> {
    let mut all: std::collections::BTreeMap<String, Totals> = match std::fs::read(file) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{}: not a chaos tally", file.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Default::default(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    let total = all.entry(backend.to_string()).or_default();
    total.add(run);
    let total = total.clone();
    std::fs::write(file, serde_json::to_vec_pretty(&all)?)
        .with_context(|| format!("cannot write {}", file.display()))?;
    Ok(total)
}

/// Fills the filesystem of `dir` with a ballast file until a write fails for lack of space;
/// returns the file (removing it gives the space back).
fn fill(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    use std::io::Write;
    let path = dir.join("ballast");
    let mut file = std::fs::File::create(&path)?;
    let chunk = vec![0u8; 1 << 16];
    let mut written = 0u64;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => return Err(e).context("writing the ballast file"),
        }
        anyhow::ensure!(
            written < 64 << 30,
            "wrote 64 GiB of ballast and the disk is not full: put --data-dir on a small \
             filesystem of its own"
        );
    }
    let _ = file.sync_all();
    Ok(path)
}

/// Prints and counts what a check found.
fn report(run: &mut Totals, found: Vec<String>) {
    for v in found {
        eprintln!("chaos: VIOLATION {v}");
        run.violations += 1;
        if run.first_violations.len() < KEEP_VIOLATIONS {
            run.first_violations.push(v);
        }
    }
}

async fn run(dir: &Path, database: &str, args: &ChaosBenchArgs) -> anyhow::Result<Totals> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let upstream = doubles::upstream().await?;
    let (webhook, effects) = doubles::webhook().await?;
    let mut config = doubles::config(&upstream, &webhook);
    let key = args.abuse.then_some(abuse::OPERATOR_KEY);
    if let Some(key) = key {
        config.push_str(&format!("\n[server]\napi_keys = [\"{key}\"]\n"));
    }
    let mut servers = Servers::start(dir, database, &config, args.nodes).await?;
    // Ports stay the same across restarts, so that clients need not learn new ones; with a
    // cluster each request goes to a node picked at random.
    let shared = Arc::new(Shared::new(servers.bases(), key));
    let tally = Arc::new(abuse::Tally::default());
    let target = match args.abuse {
        true => Some(abuse::start(shared.clone(), tally.clone()).await?),
        false => None,
    };
    let fault = match args.fault {
        ChaosFault::Kill if args.nodes > 1 => "SIGKILLs of the node holding the most sessions",
        ChaosFault::Kill => "SIGKILLs of stead serve",
        ChaosFault::DiskFull => "disk-full episodes (as long as the time between them)",
        ChaosFault::DbRestart => "restarts of the database",
        ChaosFault::None => "soak windows (no fault)",
    };
    println!(
        "chaos: {} {fault}, {} node(s), {} clients, up {}–{} ms between faults, seed {seed}",
        args.kills, args.nodes, args.clients, args.min_up_ms, args.max_up_ms
    );
    let clients: Vec<_> = (0..args.clients)
        .map(|i| {
            tokio::spawn(workload::client(
                shared.clone(),
                i,
                seed.wrapping_add(i as u64 + 1),
            ))
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut run = Totals {
        runs: 1,
        ..Default::default()
    };
    let started = Instant::now();
    for kill in 1..=args.kills {
        let up = rng.random_range(args.min_up_ms..=args.max_up_ms);
        tokio::time::sleep(Duration::from_millis(up)).await;
        let fault_at = Instant::now();
        let paused = match args.fault {
            ChaosFault::Kill => {
                let victim = servers.victim(&mut rng).await;
                servers.kill(victim)?;
                let paused = shared.gate.write().await;
                let took = servers.restart(victim).await?;
                run.max_ready_ms = run.max_ready_ms.max(took.as_millis() as u64);
                paused
            }
            ChaosFault::DiskFull => {
                let full_for = rng.random_range(args.min_up_ms..=args.max_up_ms);
                let ballast = fill(dir)?;
                tokio::time::sleep(Duration::from_millis(full_for)).await;
                std::fs::remove_file(&ballast)?;
                let paused = shared.gate.write().await;
                servers
                    .running(0)
                    .context("`stead serve` exited while the disk was full")?;
                let took = servers.ready(0).await?;
                run.max_ready_ms = run.max_ready_ms.max(took.as_millis() as u64);
                paused
            }
            ChaosFault::DbRestart => {
                restart_database(args, &shared, &mut servers, &mut run).await?
            }
            ChaosFault::None => {
                let paused = shared.gate.write().await;
                let w = window(&shared, servers.first(), started.elapsed());
                println!("  {}", w.line());
                run.windows.push(w);
                if let Some(target) = &target {
                    report(&mut run, abuse::check(&shared, target).await);
                }
                paused
            }
        };
        run.kills += 1;
        let ids = if kill % FULL_CHECK_EVERY == 0 {
            None
        } else {
            Some(shared.ledger().dirty.drain().collect::<Vec<_>>())
        };
        let checked_now = ids.as_ref().map_or(0, Vec::len);
        let found = check::check(&shared, &effects, ids, fault_at, &mut run.checked).await;
        report(&mut run, found);
        drop(paused);
        if kill % 10 == 0 || kill == args.kills {
            let sessions = shared.ledger().sessions.len();
            println!(
                "  fault {kill}/{}: {:.0} s, {} sessions so far ({} checked now), {} violations",
                args.kills,
                started.elapsed().as_secs_f64(),
                sessions,
                if checked_now == 0 {
                    sessions
                } else {
                    checked_now
                },
                run.violations
            );
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.await;
    }
    // The last word: every session of the run, once more.
    let paused = shared.gate.write().await;
    let found = check::check(&shared, &effects, None, Instant::now(), &mut run.checked).await;
    report(&mut run, found);
    drop(paused);
    run.acknowledged.add(shared.ledger().counts);
    run.server_errors = shared.ledger().server_errors.clone();
    run.unexpected_errors = shared.ledger().unexpected_errors.clone();
    if args.abuse {
        run.abuse = tally.take();
        let found = abuse_verdict(&run);
        report(&mut run, found);
    }
    drop(servers);
    Ok(run)
}

/// One database restart by `--db-restart-command`: `/readyz` must turn 503 while the database
/// is down, and the server must be ready again after; the workload is paused on return.
async fn restart_database<'s>(
    args: &ChaosBenchArgs,
    shared: &'s Arc<Shared>,
    servers: &mut Servers,
    run: &mut Totals,
) -> anyhow::Result<tokio::sync::RwLockWriteGuard<'s, ()>> {
    let command = args.db_restart_command.as_deref().unwrap_or_default();
    // Meanwhile /readyz is watched: it must turn 503 while the database is down.
    let seen = Arc::new(AtomicBool::new(false));
    let watch = tokio::spawn(watch_readiness(shared.clone(), seen.clone()));
    let started = Instant::now();
    let status = tokio::process::Command::new("sh")
        .args(["-c", command])
        .stdout(Stdio::null())
        .status()
        .await?;
    anyhow::ensure!(status.success(), "--db-restart-command failed ({status})");
    let down_for = started.elapsed();
    let paused = shared.gate.write().await;
    let took = servers.ready(0).await?;
    watch.abort();
    let saw_503 = seen.load(Ordering::Relaxed);
    run.max_ready_ms = run.max_ready_ms.max((down_for + took).as_millis() as u64);
    if !saw_503 {
        report(
            run,
            vec![format!(
                "/readyz never answered 503 while the database restarted ({} ms)",
                down_for.as_millis()
            )],
        );
    }
    servers
        .running(0)
        .context("`stead serve` exited while the database restarted")?;
    Ok(paused)
}

/// With `--abuse`, beside the limits checked per window: no legitimate request failed (no
/// step unanswered, no server error), the server's memory stayed flat (the last window within
/// a quarter and 64 MiB of the second: the first holds the start-up), and no trickled body
/// was held past the body deadline.
fn abuse_verdict(run: &Totals) -> Vec<String> {
    let mut found = Vec::new();
    if run.acknowledged.unanswered > 0 || !run.server_errors.is_empty() {
        found.push(format!(
            "abuse: legitimate requests failed: {} steps unanswered, server errors {:?}",
            run.acknowledged.unanswered, run.server_errors
        ));
    }
    if let (Some(early), Some(last)) = (run.windows.get(1), run.windows.last()) {
        if last.rss_mib > early.rss_mib * 1.25 + 64.0 {
            found.push(format!(
                "abuse: the server's memory grew from {:.1} MiB to {:.1} MiB",
                early.rss_mib, last.rss_mib
            ));
        }
    }
    for key in run.abuse.keys() {
        if key.starts_with("token-slow-body held") {
            found.push(format!("abuse: a trickled body was held: {key}"));
        }
    }
    found
}

//! The crate `stead-bench`: the measurements behind `stead bench …`, one module per subcommand
//! (`chaos`, `cluster`, `context`, `decode`, `evals` (the evaluation engine), `journal`, `gateway`, `inference`, `knowledge`, `replay`,
//! `schedules`, `sessions`, `tenancy` (projects' keys), `guardrails`, `guardrail_quality`, `ws`), the model evaluation behind `stead eval …` (`eval`), their
//! arguments (`cli`), the chaos harness with its test doubles (a scripted upstream, a webhook
//! sink: they live here, not in the product), and what they share: a scratch database (`BenchDatabase`), a `stead serve` child process
//! (`ServeProcess`) and a process's memory and CPU time read from `/proc`.
//!
//! Benchmarks are operator tools: a setup that does not hold (a histogram's fixed bounds, a
//! scripted input the decisions refuse) makes the run meaningless, so they stop loudly there.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod agent_turn;
mod artifacts;
pub mod chaos;
pub mod cli;
pub mod cluster;
pub mod context;
pub mod decode;
pub mod eval;
mod evals;
pub mod gateway;
mod gateway_peers;
mod guardrail_quality;
mod guardrails;
pub mod inference;
pub mod journal;
mod journal_raw;
pub mod knowledge;
mod knowledge_eval;
mod knowledge_query;
mod parked;
pub mod replay;
pub mod schedules;
pub mod sessions;
mod speech;
mod step_cost;
mod tenancy;
pub mod ws;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use stead_config::{prepare_data_dir, Config};
use stead_persistence::scratch::ScratchDatabase;
use stead_persistence::DatabaseUrl;

use crate::cli::{BenchBackend, BenchCommand, EvalCommand};

/// Runs one `stead bench …` command.
pub async fn bench(config: Config, command: BenchCommand) -> anyhow::Result<ExitCode> {
    let done = |result: anyhow::Result<()>| result.map(|()| ExitCode::SUCCESS);
    match command {
        BenchCommand::Journal(args) => done(journal::journal(config, args).await),
        BenchCommand::Ws(args) => done(ws::ws(config, args).await),
        BenchCommand::Gateway(args) => done(gateway::gateway(config, args).await),
        BenchCommand::Sessions(args) => done(sessions::sessions(config, args).await),
        BenchCommand::Inference(args) => done(inference::inference(config, args).await),
        BenchCommand::Decode(args) => done(decode::decode(config, args).await),
        BenchCommand::Replay(args) => done(replay::replay(config, args).await),
        BenchCommand::Chaos(args) => chaos::chaos(config, args).await,
        BenchCommand::Schedules(args) => done(schedules::schedules(config, args).await),
        BenchCommand::Cluster(args) => cluster::cluster(config, args).await,
        BenchCommand::Context(args) => done(context::context(args).await),
        BenchCommand::Knowledge(args) => knowledge::knowledge(config, args).await,
        BenchCommand::Eval(args) => done(evals::evals(config, args).await),
        BenchCommand::Tenancy(args) => done(tenancy::tenancy(config, args).await),
        BenchCommand::Guardrails(args) => done(guardrails::guardrails(args).await),
        BenchCommand::Artifacts(args) => done(artifacts::artifacts(config, args).await),
        BenchCommand::Speech(args) => done(speech::speech(config, args).await),
        BenchCommand::GuardrailQuality(args) => {
            done(guardrail_quality::guardrail_quality(args, &config.server.data_dir).await)
        }
    }
}

/// Runs one `stead eval …` command.
pub async fn eval(config: Config, command: EvalCommand) -> anyhow::Result<ExitCode> {
    match command {
        EvalCommand::Tools(args) => eval::tools(config, args).await,
        EvalCommand::Agent(args) => eval::agent::agent(config, args).await,
    }
    .map(|()| ExitCode::SUCCESS)
}

/// A database only a benchmark uses: a new SQLite file in the data directory, or a scratch
/// PostgreSQL database on the configured server; removed afterwards.
pub struct BenchDatabase {
    pub url: DatabaseUrl,
    scratch: Option<ScratchDatabase>,
    sqlite_file: Option<std::path::PathBuf>,
}

impl BenchDatabase {
    pub async fn create(config: &Config, backend: BenchBackend) -> anyhow::Result<Self> {
        Ok(match backend {
            BenchBackend::Sqlite => {
                prepare_data_dir(&config.server.data_dir)?;
                let file = config
                    .server
                    .data_dir
                    .join(format!("bench-{}.db", uuid::Uuid::new_v4().simple()));
                BenchDatabase {
                    url: DatabaseUrl::Sqlite(file.clone()),
                    scratch: None,
                    sqlite_file: Some(file),
                }
            }
            BenchBackend::Postgres => {
                let admin = config.database.url.clone().context(
                    "the postgres benchmark needs a server: set DATABASE_URL or --database-url",
                )?;
                anyhow::ensure!(
                    matches!(DatabaseUrl::parse(&admin)?, DatabaseUrl::Postgres(_)),
                    "the postgres benchmark needs a postgres:// database URL"
                );
                let scratch = ScratchDatabase::create(&admin, "stead_bench").await?;
                BenchDatabase {
                    url: DatabaseUrl::Postgres(scratch.url().to_string()),
                    scratch: Some(scratch),
                    sqlite_file: None,
                }
            }
        })
    }

    /// The URL as `--database-url` takes it.
    pub fn url_text(&self) -> String {
        match &self.url {
            DatabaseUrl::Sqlite(path) => format!(
                "sqlite://{}",
                std::path::absolute(path)
                    .unwrap_or_else(|_| path.clone())
                    .display()
            ),
            DatabaseUrl::Postgres(url) => url.clone(),
        }
    }

    pub async fn remove(self) -> anyhow::Result<()> {
        if let Some(scratch) = self.scratch {
            scratch.drop_database().await?;
        }
        if let Some(file) = self.sqlite_file {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
            }
        }
        Ok(())
    }
}

/// A `stead serve` child process for the benches (this binary, a scratch data directory,
/// SQLite), stopped when dropped.
pub struct ServeProcess {
    pub child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServeProcess {
    /// Writes `config` as the `stead.toml` of `dir` and starts `stead serve` on a free port.
    pub fn start(dir: &std::path::Path, config: &str) -> anyhow::Result<Self> {
        Self::start_with_env(dir, config, &[])
    }

    /// [`ServeProcess::start`] with extra environment variables for the server.
    pub fn start_with_env(
        dir: &std::path::Path,
        config: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        use std::io::{BufRead, BufReader};
        std::fs::write(dir.join("stead.toml"), config)?;
        let mut command = std::process::Command::new(std::env::current_exe()?);
        // The server dies with this process, even when it is killed (a Ctrl-C or a SIGTERM
        // of a bench or an evaluation runs no destructor that would stop it).
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(dir.join("stead.toml"))
            .arg("--data-dir")
            .arg(dir)
            .env_remove("DATABASE_URL")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .context("cannot start `stead serve`")?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let first = lines.next().context("the server exited")??;
        let base = first
            .strip_prefix("stead listening on ")
            .with_context(|| format!("unexpected output: {first}"))?
            .to_string();
        std::thread::spawn(move || for _ in lines {});
        Ok(ServeProcess { child, base })
    }

    /// Resident and peak resident memory (bytes).
    pub fn memory(&self) -> (u64, u64) {
        process_memory(self.child.id())
    }
}

/// Resident and peak resident memory (bytes) of process `pid`.
pub fn process_memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time (user + system) process `pid` has used.
pub fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name (in parentheses): utime and stime are the 12th and 13th fields,
    // in clock ticks (100 per second on Linux).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

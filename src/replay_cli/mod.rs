//! `stead session …` and `stead replay …`: the journal as a debugging tool, from the command
//! line. Every command works on the configured database directly (the same `DATABASE_URL`,
//! `--data-dir` and `--config` as `stead serve`), so it runs beside a live server, on a copy of
//! a production database, or in CI without one.
//!
//! This module owns the commands' arguments and their dispatch; `session` runs
//! `stead session …`, `replay` runs `stead replay state|export|import|fork`, `check` runs
//! `stead replay check`, and `output` holds the printing they share.

mod artifacts;
mod check;
mod output;
mod replay;
mod session;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use stead_persistence::{JournalStore, SessionStore};
use uuid::Uuid;

use stead_config::Config;

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Sessions, newest first.
    List(ListArgs),
    /// One session: its row, its folded state and its journal.
    Show(ShowArgs),
    /// Follows a session's journal as events commit, like `tail -f`.
    Tail(TailArgs),
    /// Compacts ended sessions' journals into a snapshot and a summary.
    Compact(CompactArgs),
}

#[derive(Debug, Subcommand)]
pub enum ReplayCommand {
    /// The session's state folded from its journal up to a seq (as `GET …/state?at=N`).
    State(StateArgs),
    /// Writes a session as JSON lines: a header, then one event per line.
    Export(ExportArgs),
    /// Creates a new session from an export.
    Import(ImportArgs),
    /// Re-drives the current agent loop's decisions over recorded journals (nothing is called);
    /// exit 1 when any diverges, 2 when one cannot be checked.
    Check(CheckArgs),
    /// A new session whose journal is a copy up to a seq, optionally on another route or
    /// system prompt.
    Fork(ForkArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    pub agent: Option<String>,
    /// idle, running, awaiting_approval, failed or closed.
    #[arg(long)]
    pub status: Option<String>,
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    pub id: Uuid,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TailArgs {
    pub id: Uuid,
    /// Events already in the journal to print first.
    #[arg(short = 'n', long, default_value_t = 10)]
    pub lines: i64,
    /// How often to look for new events.
    #[arg(long, default_value_t = 200)]
    pub interval_ms: u64,
    /// One JSON object per event (`{seq, kind, payload, at}`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Sessions to compact (each must be closed or failed).
    pub ids: Vec<Uuid>,
    /// Apply the configured policy once (`sessions.keep_journal_days`).
    #[arg(long, conflicts_with = "ids")]
    pub policy: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StateArgs {
    pub id: Uuid,
    /// Fold up to this seq (default: the last).
    #[arg(long)]
    pub at: Option<i64>,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    pub id: Uuid,
    /// Write here instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The export (`-` for standard input).
    pub file: PathBuf,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Sessions in the database.
    pub ids: Vec<Uuid>,
    /// Every session in the database.
    #[arg(long)]
    pub all: bool,
    /// Exported sessions (repeatable).
    #[arg(long, value_name = "FILE")]
    pub file: Vec<PathBuf>,
    /// Also list the sessions that pass.
    #[arg(short, long)]
    pub verbose: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    pub id: Uuid,
    /// Copy the journal up to this seq.
    #[arg(long)]
    pub at: i64,
    /// Later model calls use this route.
    #[arg(long)]
    pub route: Option<String>,
    /// Later model calls use this file's text as the system prompt.
    #[arg(long, value_name = "FILE")]
    pub system_prompt_file: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

async fn store(config: &Config) -> anyhow::Result<Arc<dyn JournalStore>> {
    if matches!(
        config.database_url(),
        stead_persistence::DatabaseUrl::Sqlite(_)
    ) {
        stead_config::prepare_data_dir(&config.server.data_dir)?;
    }
    // Migrations run quietly: these commands print only their own output.
    let store = crate::serve::open_store(config, false).await?;
    store
        .migrate()
        .await
        .with_context(|| format!("database {}", config.database_url().redacted()))?;
    Ok(store)
}

pub async fn session(config: Config, command: SessionCommand) -> anyhow::Result<ExitCode> {
    let store = store(&config).await?;
    let result = match command {
        SessionCommand::List(args) => session::list(store.as_ref(), args).await,
        SessionCommand::Show(args) => session::show(store.as_ref(), args).await,
        SessionCommand::Tail(args) => session::tail(store.as_ref(), args).await,
        SessionCommand::Compact(args) => session::compact(&config, store.as_ref(), args).await,
    };
    store.shutdown().await;
    result.map(|()| ExitCode::SUCCESS)
}

pub async fn replay(config: Config, command: ReplayCommand) -> anyhow::Result<ExitCode> {
    let store = store(&config).await?;
    let result = match command {
        ReplayCommand::State(args) => replay::state(store.as_ref(), args)
            .await
            .map(|()| ExitCode::SUCCESS),
        ReplayCommand::Export(args) => replay::export(&config, store.as_ref(), args)
            .await
            .map(|()| ExitCode::SUCCESS),
        ReplayCommand::Import(args) => replay::import(&config, store.as_ref(), args)
            .await
            .map(|()| ExitCode::SUCCESS),
        ReplayCommand::Check(args) => {
            check::check(&config, &(store.clone() as Arc<dyn SessionStore>), args).await
        }
        ReplayCommand::Fork(args) => replay::fork(&config, store.as_ref(), args)
            .await
            .map(|()| ExitCode::SUCCESS),
    };
    store.shutdown().await;
    result
}

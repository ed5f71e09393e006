//! The command line (clap). Every failure ends as one line on stderr and a non-zero exit.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use stead_config::{Config, Overrides};

#[derive(Debug, Parser)]
#[command(
    name = "stead",
    version,
    about = "Self-hosted platform for durable AI agents"
)]
pub struct Cli {
    /// Configuration file (default: ./stead.toml when present). Env: STEAD_CONFIG.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address to listen on, IP:PORT. Env: STEAD_LISTEN.
    #[arg(long, global = true, value_name = "ADDR")]
    pub listen: Option<String>,

    /// Data directory (SQLite database, models). Env: STEAD_DATA_DIR.
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// postgres://… or sqlite://PATH. Env: DATABASE_URL.
    #[arg(long, global = true, value_name = "URL")]
    pub database_url: Option<String>,

    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long)]
    pub dump_config: bool,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Prepare ONNX Runtime and the local model into the data directory (idempotent).
    Setup(SetupArgs),
    /// Inspect and maintain sessions in the database.
    #[command(subcommand)]
    Session(crate::replay_cli::SessionCommand),
    /// Replay debugging: state at a seq, export and import, decision checks, forks.
    #[command(subcommand)]
    Replay(crate::replay_cli::ReplayCommand),
    /// Measure Stead's own components.
    #[command(subcommand)]
    Bench(stead_bench::cli::BenchCommand),
    /// Evaluations: datasets from recorded sessions, runs, comparisons, and the local
    /// model's agent benches.
    #[command(subcommand)]
    Eval(crate::eval_cli::EvalCli),
    /// Knowledge collections: add files, re-embed, query (docs/knowledge.md).
    #[command(subcommand)]
    Knowledge(crate::knowledge_cli::KnowledgeCommand),
}

#[derive(Debug, Clone, Args)]
pub struct SetupArgs {
    /// Weight precision of the converted model.
    #[arg(long, default_value = "int4", value_parser = ["int4", "int8", "fp32"])]
    pub precision: String,
    /// The bundled model to prepare: qwen2.5-coder-0.5b-instruct (the default; calls tools),
    /// smollm2-135m-instruct (small and fast; does not call tools) or gemma3-270m (a base model
    /// with no chat template, for converter checks).
    #[arg(long, value_name = "NAME", conflicts_with = "gguf")]
    pub model: Option<String>,
    /// Convert this GGUF (llama, qwen2, qwen3 or gemma3 architecture) instead of a bundled model.
    #[arg(long, value_name = "FILE")]
    pub gguf: Option<PathBuf>,
    /// Directory name under {data_dir}/models (default: the model's name, or the GGUF's stem).
    #[arg(long)]
    pub name: Option<String>,
    /// Python interpreter for the converter's virtual environment.
    #[arg(long, default_value = "python3")]
    pub python: String,
}

impl Cli {
    fn overrides(&self) -> Overrides {
        Overrides {
            config_file: self.config.clone(),
            listen: self.listen.clone(),
            data_dir: self.data_dir.clone(),
            database_url: self.database_url.clone(),
        }
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let text = info.to_string().replace('\n', " ");
        eprintln!("stead: internal error: {text}");
    }));
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("stead: {}", format!("{error:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let config = Config::load(&cli.overrides())?;
    if cli.dump_config {
        print!("{}", config.to_redacted_toml());
        return Ok(ExitCode::SUCCESS);
    }
    let Some(command) = cli.command else {
        anyhow::bail!("no command given; try `stead serve` or `stead --help`");
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let traces = {
        let _runtime = runtime.enter();
        crate::telemetry::tracer_provider()
    };
    crate::telemetry::init(&config, traces.as_ref());
    runtime.block_on(async move {
        let result = run_command(config, command).await;
        crate::telemetry::shutdown(traces).await;
        result
    })
}

/// Runs one command; commands that only succeed or fail exit 0 on success.
async fn run_command(config: Config, command: Command) -> anyhow::Result<ExitCode> {
    let done = |result: anyhow::Result<()>| result.map(|()| ExitCode::SUCCESS);
    match command {
        Command::Session(command) => crate::replay_cli::session(config, command).await,
        Command::Replay(command) => crate::replay_cli::replay(config, command).await,
        Command::Serve => done(crate::serve::serve(config).await),
        Command::Migrate => done(crate::serve::migrate(config).await),
        Command::Setup(args) => done(crate::serve::setup(config, args).await),
        Command::Eval(command) => crate::eval_cli::run(config, command).await,
        Command::Knowledge(command) => crate::knowledge_cli::run(config, command).await,
        Command::Bench(command) => stead_bench::bench(config, command).await,
    }
}

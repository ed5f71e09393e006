//! `stead eval dataset …`, `stead eval run` and `stead eval compare` (docs/evals.md): datasets
//! of cases from recorded sessions, runs of them through the agent loop in this process (the
//! configured agents, routes and engines, on the configured database), and comparisons of two
//! runs. A run is a CI gate: `--fail-under` exits 1 below the pass rate.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use stead_config::Config;
use stead_evals::compare::{compare, Comparison, Flip};
use stead_evals::run::{ApprovalRule, CaseResult, RunSettings, Runner, EVAL_PRINCIPAL};
use stead_evals::{Case, Expectation, ToolMode};
use stead_persistence::{JournalStore, DEFAULT_PROJECT};
use uuid::Uuid;

/// `stead eval`: the model-quality benches, and evaluation from the journal.
#[derive(Debug, Subcommand)]
pub enum EvalCli {
    #[command(flatten)]
    Bench(stead_bench::cli::EvalCommand),
    /// Datasets of cases taken from recorded sessions.
    #[command(subcommand)]
    Dataset(DatasetCommand),
    /// Runs a dataset's cases through the agent loop and grades them.
    Run(RunArgs),
    /// Two runs side by side: pass rates, tokens, latency, and the cases that flipped.
    Compare(CompareArgs),
}

#[derive(Debug, Subcommand)]
pub enum DatasetCommand {
    /// A new, empty dataset.
    Create { name: String },
    /// Adds the case at a user message of a recorded session (default: its first).
    Add(AddArgs),
    /// Every dataset with its version and number of cases.
    List,
    /// A dataset's cases (`--json`: as JSONL, like export).
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Writes a dataset as JSONL (cases carry their history).
    Export {
        name: String,
        /// The file to write (default: standard output).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Reads a JSONL dataset into a new dataset.
    Import {
        file: PathBuf,
        /// The new dataset's name (default: the file's).
        #[arg(long)]
        name: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct AddArgs {
    pub name: String,
    #[arg(long, value_name = "ID")]
    pub session: Uuid,
    /// The seq of the user message the case starts at.
    #[arg(long, value_name = "SEQ")]
    pub at: Option<i64>,
    /// A JSON file with the case's expectations (a list); without it, the recording is the
    /// baseline.
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    pub dataset: String,
    /// Another route for every model call.
    #[arg(long)]
    pub route: Option<String>,
    /// Another system prompt, read from this file.
    #[arg(long, value_name = "FILE")]
    pub system_prompt_file: Option<PathBuf>,
    /// Agents (`[[agents]]` tables, as in stead.toml) that replace the configured agents of
    /// the same name for this run: another prompt, other tools or policies.
    #[arg(long, value_name = "FILE")]
    pub agent_config: Option<PathBuf>,
    /// `replay` (recorded results; the default) or `live` (tools run for real).
    #[arg(long, default_value = "replay", value_parser = ["replay", "live"])]
    pub tools: String,
    /// Replay mode: an unmatched call of an idempotent tool runs for real.
    #[arg(long)]
    pub live_idempotent: bool,
    /// Live mode: non-idempotent tools run too.
    #[arg(long)]
    pub side_effects: bool,
    /// How an approval no recording covers is decided.
    #[arg(long, default_value = "reject", value_parser = ["approve", "reject", "fail"])]
    pub approvals: String,
    /// The route that judges `judge` expectations and, for cases without expectations,
    /// whether a changed reply says the same as the recorded one.
    #[arg(long, value_name = "ROUTE")]
    pub judge_route: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// Exit 1 when the share of passing cases is below this (0–1).
    #[arg(long, value_name = "RATIO")]
    pub fail_under: Option<f64>,
    /// Print the run with every case's result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    pub a: Uuid,
    pub b: Uuid,
    #[arg(long)]
    pub json: bool,
}

pub async fn run(config: Config, command: EvalCli) -> anyhow::Result<ExitCode> {
    match command {
        EvalCli::Bench(command) => stead_bench::eval(config, command).await,
        EvalCli::Dataset(command) => {
            let store = crate::serve::open_store(&config, true).await?;
            let result = dataset(&config, store.as_ref(), command).await;
            store.shutdown().await;
            result.map(|()| ExitCode::SUCCESS)
        }
        EvalCli::Run(args) => evaluate(config, args).await,
        EvalCli::Compare(args) => {
            let store = crate::serve::open_store(&config, true).await?;
            let result = compare_runs(store.as_ref(), &args).await;
            store.shutdown().await;
            result.map(|()| ExitCode::SUCCESS)
        }
    }
}

async fn dataset(
    config: &Config,
    store: &dyn JournalStore,
    command: DatasetCommand,
) -> anyhow::Result<()> {
    match command {
        DatasetCommand::Create { name } => {
            store.create_dataset(DEFAULT_PROJECT, &name).await?;
            println!("created dataset {name}");
        }
        DatasetCommand::Add(args) => {
            let expect: Vec<Expectation> = match &args.expect {
                Some(path) => serde_json::from_str(
                    &std::fs::read_to_string(path)
                        .with_context(|| format!("cannot read {}", path.display()))?,
                )
                .context("the expectations are not a JSON list of expectations")?,
                None => Vec::new(),
            };
            let case = case_from_session(store, args.session, args.at, expect).await?;
            let row = store
                .add_cases(
                    DEFAULT_PROJECT,
                    &args.name,
                    &[(case.id, serde_json::to_value(&case)?)],
                )
                .await?;
            println!(
                "added case {} ({}) to {}: {} cases, version {}",
                case.id, case.name, row.name, row.cases, row.version
            );
        }
        DatasetCommand::List => {
            for row in store.list_datasets(DEFAULT_PROJECT).await? {
                println!("{}\t{} cases\tversion {}", row.name, row.cases, row.version);
            }
        }
        DatasetCommand::Show { name, json } => {
            let (row, cases) = cases_of(store, &name).await?;
            if json {
                print!("{}", stead_evals::jsonl::write(&name, row.version, &cases));
            } else {
                for case in &cases {
                    let expect: usize = case.turns.iter().map(|t| t.expect.len()).sum();
                    println!(
                        "{}\t{}\t{} turn(s)\t{}",
                        case.id,
                        case.name,
                        case.turns.len(),
                        if expect == 0 {
                            "recorded baseline".to_string()
                        } else {
                            format!("{expect} expectation(s)")
                        }
                    );
                }
            }
        }
        DatasetCommand::Export { name, out } => {
            let (row, cases) = cases_of(store, &name).await?;
            let text = stead_evals::jsonl::write(&name, row.version, &cases);
            match out {
                Some(path) => std::fs::write(&path, text)
                    .with_context(|| format!("cannot write {}", path.display()))?,
                None => std::io::stdout().write_all(text.as_bytes())?,
            }
        }
        DatasetCommand::Import { file, name } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let (header, cases) = stead_evals::jsonl::read(&text)?;
            let name = name.unwrap_or(header.name);
            store.create_dataset(DEFAULT_PROJECT, &name).await?;
            let rows: Vec<_> = cases
                .iter()
                .map(|c| Ok((c.id, serde_json::to_value(c)?)))
                .collect::<anyhow::Result<_>>()?;
            let row = store.add_cases(DEFAULT_PROJECT, &name, &rows).await?;
            println!(
                "imported {} cases into {name} (version {})",
                row.cases, row.version
            );
        }
    }
    let _ = config;
    Ok(())
}

/// The case at `at` (default: the first user message) of a recorded session.
async fn case_from_session(
    store: &dyn JournalStore,
    session: Uuid,
    at: Option<i64>,
    expect: Vec<Expectation>,
) -> anyhow::Result<Case> {
    let row = store.get_session(session).await?;
    let events = stead_actors::replay::read_all(store, session, 0).await?;
    Ok(Case::from_journal(
        &row.agent, session, &events, at, expect,
    )?)
}

async fn cases_of(
    store: &dyn JournalStore,
    name: &str,
) -> anyhow::Result<(stead_persistence::evals::DatasetRow, Vec<Case>)> {
    let row = store.get_dataset(DEFAULT_PROJECT, name).await?;
    let cases = store
        .dataset_cases(DEFAULT_PROJECT, name)
        .await?
        .into_iter()
        .map(|c| serde_json::from_value(c.body).context("a stored case does not read"))
        .collect::<anyhow::Result<_>>()?;
    Ok((row, cases))
}

fn settings(args: &RunArgs) -> anyhow::Result<RunSettings> {
    let system_prompt = match &args.system_prompt_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?,
        ),
        None => None,
    };
    Ok(RunSettings {
        route: args.route.clone(),
        system_prompt,
        tools: if args.tools == "live" {
            ToolMode::Live
        } else {
            ToolMode::Replay
        },
        live_idempotent: args.live_idempotent,
        side_effects: args.side_effects,
        approvals: match args.approvals.as_str() {
            "approve" => ApprovalRule::Approve,
            "fail" => ApprovalRule::Fail,
            _ => ApprovalRule::Reject,
        },
        judge_route: args.judge_route.clone(),
        concurrency: args.concurrency,
        agent_config: args.agent_config.as_ref().map(|p| p.display().to_string()),
        ..Default::default()
    })
}

/// `--agent-config`: the file's `[[agents]]`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentsFile {
    agents: Vec<stead_config::AgentConfig>,
}

/// `config` with the agents of `path` in place of the configured ones of the same name (new
/// names are added), checked as a whole like stead.toml.
fn with_agents(mut config: Config, path: &std::path::Path) -> anyhow::Result<Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file: AgentsFile = toml::from_str(&text)
        .with_context(|| format!("{} is not a list of [[agents]]", path.display()))?;
    for agent in file.agents {
        match config.agents.iter_mut().find(|a| a.name == agent.name) {
            Some(slot) => *slot = agent,
            None => config.agents.push(agent),
        }
    }
    config.validate().with_context(|| {
        format!(
            "the agents of {} do not fit the configuration",
            path.display()
        )
    })?;
    Ok(config)
}

/// `stead eval run`: the agents of this configuration, in this process.
async fn evaluate(config: Config, args: RunArgs) -> anyhow::Result<ExitCode> {
    if let Some(ratio) = args.fail_under {
        if !(0.0..=1.0).contains(&ratio) {
            bail!("--fail-under is a share between 0 and 1");
        }
    }
    let config = match &args.agent_config {
        Some(path) => with_agents(config, path)?,
        None => config,
    };
    let settings = settings(&args)?;
    let (pools, embedders, store) = crate::serve::start_backends(&config).await?;
    let node = format!("eval-{}", Uuid::now_v7());
    let agents = crate::serve::agents(&config, &store, (&pools, &embedders), (None, None), node);
    let outcome = match agents {
        Ok(agents) => {
            let runner = Runner {
                sessions: store.clone(),
                evals: store.clone(),
                registry: agents.sessions.clone(),
                judge: Some(Arc::new(stead_agents::models::RouterJudge {
                    router: agents.model_router.clone(),
                })),
            };
            let outcome = run_dataset(&runner, &args, &settings).await;
            agents
                .sessions
                .passivate_all(std::time::Duration::from_secs(5))
                .await;
            agents.mcp.shutdown().await;
            outcome
        }
        Err(error) => Err(error),
    };
    stead_agents::engines::stop_local_models(&pools).await;
    store.shutdown().await;
    let (run, results) = outcome?;
    let passed = results.iter().filter(|r| r.passed).count();
    let rate = if results.is_empty() {
        1.0
    } else {
        passed as f64 / results.len() as f64
    };
    if args.json {
        let body = serde_json::json!({
            "id": run,
            "dataset": args.dataset,
            "summary": { "total": results.len(), "passed": passed, "failed": results.len() - passed, "pass_rate": rate },
            "cases": results,
        });
        println!("{body}");
    } else {
        print_results(run, &results, rate);
    }
    Ok(match args.fail_under {
        Some(floor) if rate < floor => {
            eprintln!("pass rate {rate:.3} is under --fail-under {floor}");
            ExitCode::from(1)
        }
        _ => ExitCode::SUCCESS,
    })
}

async fn run_dataset(
    runner: &Runner,
    args: &RunArgs,
    settings: &RunSettings,
) -> anyhow::Result<(Uuid, Vec<CaseResult>)> {
    let (run, cases) = runner
        .create(DEFAULT_PROJECT, &args.dataset, settings)
        .await?;
    let total = cases.len();
    eprintln!("run {} of {} ({total} cases)", run.id, args.dataset);
    let results = runner
        .execute(&run, cases, settings, EVAL_PRINCIPAL, |done, passed| {
            eprint!("\r[{done}/{total}] {passed} passed");
            if done == total {
                eprintln!();
            }
        })
        .await?;
    Ok((run.id, results))
}

fn print_results(run: Uuid, results: &[CaseResult], rate: f64) {
    for result in results {
        println!(
            "{} {}",
            if result.passed { "pass" } else { "FAIL" },
            result.name
        );
        if let Some(error) = &result.error {
            println!("    error: {error}");
        }
        for turn in &result.turns {
            for verdict in turn.verdicts.iter().filter(|v| !v.passed) {
                println!("    ✗ {}: {}", verdict.grader, verdict.detail);
            }
            for call in &turn.unavailable {
                println!("    not available in evaluation: {call}");
            }
        }
    }
    let passed = results.iter().filter(|r| r.passed).count();
    println!(
        "run {run}: {passed}/{} passed ({:.0} %)",
        results.len(),
        rate * 100.0
    );
}

async fn compare_runs(store: &dyn JournalStore, args: &CompareArgs) -> anyhow::Result<()> {
    let read = |run: Uuid| async move {
        store
            .eval_results(run)
            .await?
            .into_iter()
            .map(|r| serde_json::from_value::<CaseResult>(r.body).context("a stored result"))
            .collect::<anyhow::Result<Vec<_>>>()
    };
    store.get_eval_run(args.a).await?;
    store.get_eval_run(args.b).await?;
    let (a, b) = (read(args.a).await?, read(args.b).await?);
    let comparison = compare((args.a, &a), (args.b, &b));
    if args.json {
        println!("{}", serde_json::to_string(&comparison)?);
    } else {
        print_comparison(&comparison);
    }
    Ok(())
}

fn print_comparison(c: &Comparison) {
    for (label, f) in [("A", &c.a), ("B", &c.b)] {
        println!(
            "{label} {}: {}/{} passed ({:.0} %), {} tokens, ${:.4}, latency p50 {:.0} ms p99 {:.0} ms",
            f.run,
            f.passed,
            f.cases,
            f.pass_rate * 100.0,
            f.tokens,
            f.cost_usd,
            f.latency_p50_ms,
            f.latency_p99_ms
        );
    }
    println!("{} regressed, {} fixed", c.regressed, c.fixed);
    for case in &c.cases {
        let mark = match case.flip {
            Flip::Regressed => "pass → FAIL",
            Flip::Fixed => "FAIL → pass",
            Flip::StillFailing => "FAIL → FAIL",
            Flip::StillPassing => "pass → pass",
            Flip::OnlyA => "only in A",
            Flip::OnlyB => "only in B",
        };
        println!("{mark}\t{}", case.name);
        if case.flip == Flip::Regressed {
            for turn in case.b.iter().flat_map(|b| b.turns.iter()) {
                for verdict in turn.verdicts.iter().filter(|v| !v.passed) {
                    println!("    ✗ {}: {}", verdict.grader, verdict.detail);
                }
            }
        }
    }
}

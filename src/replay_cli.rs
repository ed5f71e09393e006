//! `stead session …` and `stead replay …`: the journal as a debugging tool, from the command
//! line. Every command works on the configured database directly (the same `DATABASE_URL`,
//! `--data-dir` and `--config` as `stead serve`), so it runs beside a live server, on a copy of
//! a production database, or in CI without one.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use stead_actors::replay::{self, CheckReport, Export};
use stead_actors::{AgentRules, Overrides};
use stead_persistence::{Event, JournalStore, SessionQuery, SessionStatus};
use uuid::Uuid;

use crate::config::Config;

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
        crate::serve::prepare_data_dir(&config.server.data_dir)?;
    }
    // Migrations run quietly: these commands print only their own output.
    let store = crate::serve::open_store(config, false).await?;
    store
        .migrate()
        .await
        .with_context(|| format!("database {}", config.database_url().redacted()))?;
    Ok(store)
}

fn print_json(value: &Value) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

pub async fn session(config: Config, command: SessionCommand) -> anyhow::Result<ExitCode> {
    let store = store(&config).await?;
    let result = match command {
        SessionCommand::List(args) => list(&store, args).await,
        SessionCommand::Show(args) => show(&store, args).await,
        SessionCommand::Tail(args) => tail(&store, args).await,
        SessionCommand::Compact(args) => compact(&config, &store, args).await,
    };
    store.shutdown().await;
    result.map(|()| ExitCode::SUCCESS)
}

pub async fn replay(config: Config, command: ReplayCommand) -> anyhow::Result<ExitCode> {
    let store = store(&config).await?;
    let result = match command {
        ReplayCommand::State(args) => state(&store, args).await.map(|()| ExitCode::SUCCESS),
        ReplayCommand::Export(args) => export(&config, &store, args)
            .await
            .map(|()| ExitCode::SUCCESS),
        ReplayCommand::Import(args) => import(&config, &store, args)
            .await
            .map(|()| ExitCode::SUCCESS),
        ReplayCommand::Check(args) => check(&config, &store, args).await,
        ReplayCommand::Fork(args) => fork(&config, &store, args)
            .await
            .map(|()| ExitCode::SUCCESS),
    };
    store.shutdown().await;
    result
}

// ---------------------------------------------------------------------------------------------
// stead session …

async fn list(store: &Arc<dyn JournalStore>, args: ListArgs) -> anyhow::Result<()> {
    let status = args
        .status
        .as_deref()
        .map(str::parse::<SessionStatus>)
        .transpose()?;
    let page = store
        .list_sessions(&SessionQuery {
            agent: args.agent,
            status,
            limit: args.limit,
            cursor: None,
        })
        .await?;
    if args.json {
        return print_json(&serde_json::to_value(&page)?);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<36}  {:<12}  {:<17}  {:>8}  {:<19}  UPDATED",
        "ID", "AGENT", "STATUS", "LAST SEQ", "CREATED"
    )?;
    for s in &page.sessions {
        writeln!(
            out,
            "{:<36}  {:<12}  {:<17}  {:>8}  {:<19}  {}",
            s.id,
            s.agent,
            s.status.as_str(),
            s.last_seq,
            s.created_at.format("%Y-%m-%d %H:%M:%S"),
            s.updated_at.format("%Y-%m-%d %H:%M:%S")
        )?;
    }
    if page.next_cursor.is_some() {
        writeln!(
            out,
            "… more: raise --limit (at most {})",
            stead_persistence::MAX_PAGE
        )?;
    }
    Ok(())
}

async fn show(store: &Arc<dyn JournalStore>, args: ShowArgs) -> anyhow::Result<()> {
    let row = store.get_session(args.id).await?;
    let compaction = store.compaction(args.id).await?;
    let folded = replay::fold_until(store, args.id, row.last_seq).await?;
    let events = replay::read_all(store, args.id, 0).await?;
    if args.json {
        return print_json(&json!({
            "session": row,
            "state": replay::state_view(args.id, &folded),
            "compaction": compaction.as_ref().map(|c| json!({
                "through_seq": c.through_seq,
                "summary": c.summary,
                "compacted_at": c.compacted_at,
            })),
            "events": events.iter().map(event_json).collect::<Vec<_>>(),
        }));
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "session   {}", row.id)?;
    writeln!(out, "agent     {}", row.agent)?;
    writeln!(out, "status    {}", folded.status())?;
    writeln!(out, "created   {}", row.created_at.to_rfc3339())?;
    writeln!(out, "updated   {}", row.updated_at.to_rfc3339())?;
    writeln!(out, "last seq  {}", row.last_seq)?;
    writeln!(
        out,
        "usage     {} prompt + {} completion tokens, {} model calls, {} tool calls",
        folded.usage.prompt_tokens,
        folded.usage.completion_tokens,
        folded.model_calls_total,
        folded.tool_calls_total
    )?;
    if let Some((from, at)) = &folded.forked_from {
        writeln!(out, "forked    from {from} at seq {at}")?;
    }
    for call in folded.pending_approvals() {
        writeln!(
            out,
            "pending   approval of {} {} ({})",
            call.call_id, call.tool, call.arguments
        )?;
    }
    if let Some(c) = &compaction {
        writeln!(
            out,
            "compacted through seq {} at {}: {}",
            c.through_seq,
            c.compacted_at.to_rfc3339(),
            c.summary
        )?;
    }
    writeln!(out)?;
    for event in &events {
        writeln!(out, "{}", human(event))?;
    }
    Ok(())
}

async fn tail(store: &Arc<dyn JournalStore>, args: TailArgs) -> anyhow::Result<()> {
    let row = store.get_session(args.id).await?;
    let mut after = (row.last_seq - args.lines.max(0)).max(0);
    let interval = Duration::from_millis(args.interval_ms.max(10));
    loop {
        let page = store.read(args.id, after, 1000).await?;
        if !page.is_empty() {
            let mut out = std::io::stdout().lock();
            for event in &page {
                if args.json {
                    serde_json::to_writer(&mut out, &event_json(event))?;
                    writeln!(out)?;
                } else {
                    writeln!(out, "{}", human(event))?;
                }
                after = event.seq;
            }
            out.flush()?;
        }
        if page.len() < 1000 {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
        }
    }
}

async fn compact(
    config: &Config,
    store: &Arc<dyn JournalStore>,
    args: CompactArgs,
) -> anyhow::Result<()> {
    let mut failed: Vec<(Uuid, String)> = Vec::new();
    let done = if args.policy {
        let Some(days) = config.sessions.keep_journal_days else {
            bail!("no retention policy is configured (set sessions.keep_journal_days)");
        };
        crate::retention::sweep(store, days, |id, summary| {
            if !args.json {
                println!("compacted {id} ({} events)", summary["events"]);
            }
        })
        .await?
    } else {
        if args.ids.is_empty() {
            bail!("name the sessions to compact, or pass --policy");
        }
        let mut done = Vec::new();
        for id in &args.ids {
            match replay::compact(store, *id).await {
                Ok(compaction) => {
                    if !args.json {
                        println!(
                            "compacted {id} through seq {} ({} events)",
                            compaction.through_seq, compaction.summary["events"]
                        );
                    }
                    done.push(compaction);
                }
                Err(error) => failed.push((*id, error.to_string())),
            }
        }
        done
    };
    if args.json {
        print_json(&json!({
            "compacted": done.iter().map(|c| json!({
                "session_id": c.session_id,
                "through_seq": c.through_seq,
                "summary": c.summary,
            })).collect::<Vec<_>>(),
            "refused": failed.iter().map(|(id, error)| json!({
                "session_id": id, "error": error,
            })).collect::<Vec<_>>(),
        }))?;
    } else if done.is_empty() && failed.is_empty() {
        println!("nothing to compact");
    }
    if !failed.is_empty() {
        let all: Vec<String> = failed.iter().map(|(_, e)| e.clone()).collect();
        bail!(
            "{} session(s) not compacted: {}",
            failed.len(),
            all.join("; ")
        );
    }
    Ok(())
}

/// An event as the REST events endpoint and exports show it.
fn event_json(event: &Event) -> Value {
    json!({
        "seq": event.seq,
        "kind": event.kind,
        "payload": event.payload,
        "at": event.created_at,
    })
}

/// At most `max` characters of `text`, on one line.
fn clip(text: &str, max: usize) -> String {
    let line = text.replace('\n', " ");
    if line.chars().count() <= max {
        line
    } else {
        let mut cut: String = line.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

/// One event on one line for people: seq, time, kind and what matters about it.
fn human(event: &Event) -> String {
    let p = &event.payload;
    let s = |key: &str| p[key].as_str().unwrap_or_default().to_string();
    let detail = match event.kind.as_str() {
        "session_created" => format!("agent {}", s("agent")),
        "user_message" | "assistant_message" => format!("{:?}", clip(&s("text"), 100)),
        "model_call_started" => format!("{} route {}", s("call_id"), s("route")),
        "model_call_finished" => {
            let tools: Vec<String> = p["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["tool"].as_str().unwrap_or_default().to_string())
                .collect();
            format!(
                "{} {:?}{} · {}+{} tokens · {:.0} ms · {}/{}",
                s("call_id"),
                clip(&s("text"), 60),
                if tools.is_empty() {
                    String::new()
                } else {
                    format!(" → {}", tools.join(", "))
                },
                p["usage"]["prompt_tokens"],
                p["usage"]["completion_tokens"],
                p["latency_ms"].as_f64().unwrap_or_default(),
                s("provider"),
                s("model")
            )
        }
        "model_call_failed" => format!("{} {}", s("call_id"), clip(&s("error"), 100)),
        "tool_call_requested" | "approval_requested" => {
            let why = p["reason"]
                .as_str()
                .map_or(String::new(), |r| format!(" — {r}"));
            format!(
                "{} {}({}){why}",
                s("call_id"),
                s("tool"),
                clip(&p["arguments"].to_string(), 80)
            )
        }
        "approval_decided" => format!(
            "{} {} by {} ({}){}",
            s("call_id"),
            if p["approved"] == true {
                "approved"
            } else {
                "rejected"
            },
            s("decided_by"),
            s("scope"),
            p["reason"]
                .as_str()
                .map_or(String::new(), |r| format!(": {r}"))
        ),
        "tool_call_started" => format!("{} {}", s("call_id"), s("tool")),
        "tool_call_finished" => format!(
            "{} {} → {}",
            s("call_id"),
            s("tool"),
            clip(&p["result"].to_string(), 80)
        ),
        "tool_call_failed" => format!(
            "{} {} {}{}",
            s("call_id"),
            s("tool"),
            clip(&s("error"), 80),
            if p["in_doubt"] == true {
                " [in doubt]"
            } else {
                ""
            }
        ),
        "turn_finished" | "turn_cancelled" | "session_failed" | "session_closed" => s("reason"),
        "session_forked" => format!(
            "from {} at seq {} {}",
            s("from"),
            p["at"],
            p.get("overrides").map(Value::to_string).unwrap_or_default()
        ),
        _ => clip(&p.to_string(), 100),
    };
    format!(
        "{:>6}  {}  {:<20}  {detail}",
        event.seq,
        event.created_at.format("%H:%M:%S%.3f"),
        event.kind
    )
}

// ---------------------------------------------------------------------------------------------
// stead replay …

async fn state(store: &Arc<dyn JournalStore>, args: StateArgs) -> anyhow::Result<()> {
    let row = store.get_session(args.id).await?;
    let at = args.at.unwrap_or(row.last_seq);
    if at < 1 || at > row.last_seq {
        bail!(
            "--at must be between 1 and the session's last seq ({})",
            row.last_seq
        );
    }
    let folded = replay::fold_until(store, args.id, at).await?;
    print_json(&replay::state_view(args.id, &folded))
}

fn agent_hash(config: &Config, agent: &str) -> Option<String> {
    config
        .agents
        .iter()
        .find(|a| a.name == agent)
        .map(crate::agents::config_hash)
}

async fn export(
    config: &Config,
    store: &Arc<dyn JournalStore>,
    args: ExportArgs,
) -> anyhow::Result<()> {
    let row = store.get_session(args.id).await?;
    let header = replay::export_header(store, &row, agent_hash(config, &row.agent)).await?;
    let written = match &args.output {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            let mut out = std::io::BufWriter::new(file);
            replay::write_export(store, &header, &mut out).await?
        }
        None => {
            let mut out = std::io::BufWriter::new(std::io::stdout());
            replay::write_export(store, &header, &mut out).await?
        }
    };
    eprintln!("exported {} ({written} events)", row.id);
    Ok(())
}

fn read_export(path: &PathBuf) -> anyhow::Result<Export> {
    let parsed = if path.as_os_str() == "-" {
        replay::parse_export(std::io::stdin().lock())
    } else {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        replay::parse_export(std::io::BufReader::new(file))
    };
    parsed.map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

async fn import(
    config: &Config,
    store: &Arc<dyn JournalStore>,
    args: ImportArgs,
) -> anyhow::Result<()> {
    let export = read_export(&args.file)?;
    let agent = &export.header.agent;
    let Some(current) = agent_hash(config, agent) else {
        bail!(
            "{}: the session's agent `{agent}` is not configured here (configured: {})",
            args.file.display(),
            config
                .agents
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    if export.header.agent_config_hash.as_deref() != Some(current.as_str()) {
        eprintln!(
            "stead: note: agent `{agent}` is configured differently here than where the session was recorded; `stead replay check` shows whether its decisions differ"
        );
    }
    let row = replay::import(store, &export).await?;
    if args.json {
        print_json(&json!({
            "id": row.id,
            "imported_from": export.header.session_id,
            "agent": row.agent,
            "status": row.status,
            "last_seq": row.last_seq,
        }))
    } else {
        println!("{}", row.id);
        eprintln!(
            "imported {} as {} ({} events, {})",
            export.header.session_id,
            row.id,
            row.last_seq,
            row.status.as_str()
        );
        Ok(())
    }
}

async fn fork(
    config: &Config,
    store: &Arc<dyn JournalStore>,
    args: ForkArgs,
) -> anyhow::Result<()> {
    if let Some(route) = &args.route {
        if !config.routes.iter().any(|r| &r.name == route) {
            bail!("--route: no route is named `{route}`");
        }
    }
    let system_prompt = args
        .system_prompt_file
        .as_ref()
        .map(|path| {
            std::fs::read_to_string(path)
                .with_context(|| format!("--system-prompt-file: cannot read {}", path.display()))
        })
        .transpose()?;
    let source = store.get_session(args.id).await?;
    let overrides = Overrides {
        route: args.route,
        system_prompt,
    };
    let (row, last_seq) = replay::fork(store, &source, args.at, overrides).await?;
    let status = replay::settle_status(store, row.id).await?.status;
    if args.json {
        print_json(&json!({
            "id": row.id,
            "forked_from": { "session_id": args.id, "at": args.at },
            "agent": row.agent,
            "status": status,
            "last_seq": last_seq,
        }))
    } else {
        println!("{}", row.id);
        eprintln!(
            "forked {} at seq {} as {} ({}); it continues when a server activates it",
            args.id,
            args.at,
            row.id,
            status.as_str()
        );
        Ok(())
    }
}

/// One journal to check: where it came from and its events.
struct Recording {
    source: String,
    session_id: Uuid,
    agent: String,
    metadata: Value,
    events: Vec<Event>,
    /// Its journal was compacted: the events up to some seq are gone.
    compacted: bool,
}

enum Outcome {
    Checked(CheckReport),
    Skipped(String),
    Error(String),
}

async fn check(
    config: &Config,
    store: &Arc<dyn JournalStore>,
    args: CheckArgs,
) -> anyhow::Result<ExitCode> {
    if args.ids.is_empty() && !args.all && args.file.is_empty() {
        bail!("name sessions, --all or --file FILE");
    }
    let started = Instant::now();
    let mut rules: HashMap<String, Result<AgentRules, String>> = HashMap::new();
    for agent in &config.agents {
        rules.insert(
            agent.name.clone(),
            crate::agents::rules(agent).map_err(|e| format!("{e:#}")),
        );
    }
    let mut results: Vec<(String, Uuid, Outcome)> = Vec::new();
    let judge = |recording: Recording| {
        let outcome = if recording.compacted {
            Outcome::Skipped("the journal was compacted".into())
        } else {
            match rules.get(&recording.agent) {
                None => Outcome::Error(format!("agent `{}` is not configured", recording.agent)),
                Some(Err(e)) => Outcome::Error(e.clone()),
                Some(Ok(rules)) => match replay::check(
                    recording.session_id,
                    &recording.metadata,
                    &recording.events,
                    rules,
                ) {
                    Ok(report) => Outcome::Checked(report),
                    Err(unreadable) => Outcome::Error(unreadable.to_string()),
                },
            }
        };
        (recording.source, recording.session_id, outcome)
    };
    for path in &args.file {
        let export = match read_export(path) {
            Ok(export) => export,
            Err(error) => {
                results.push((
                    path.display().to_string(),
                    Uuid::nil(),
                    Outcome::Error(format!("{error:#}")),
                ));
                continue;
            }
        };
        let id = export.header.session_id;
        results.push(judge(Recording {
            source: path.display().to_string(),
            session_id: id,
            agent: export.header.agent.clone(),
            metadata: export.header.metadata.clone(),
            events: export
                .events
                .into_iter()
                .map(|e| Event {
                    session_id: id,
                    seq: e.seq,
                    kind: e.kind,
                    payload: e.payload,
                    created_at: e.at,
                })
                .collect(),
            compacted: false,
        }));
    }
    let mut ids = args.ids.clone();
    if args.all {
        let mut cursor = None;
        loop {
            let page = store
                .list_sessions(&SessionQuery {
                    limit: stead_persistence::MAX_PAGE,
                    cursor,
                    ..Default::default()
                })
                .await?;
            ids.extend(page.sessions.iter().map(|s| s.id));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    // Reads overlap (a few sessions at a time); checks run as each journal arrives.
    use futures_util::StreamExt;
    let mut reads = futures_util::stream::iter(ids)
        .map(|id| {
            let store = store.clone();
            let read = async move {
                let row = store.get_session(id).await?;
                let events = replay::read_all(&store, id, 0).await?;
                let compacted = events.first().map_or(row.last_seq > 0, |e| e.seq != 1);
                anyhow::Ok(Recording {
                    source: "database".into(),
                    session_id: id,
                    agent: row.agent,
                    metadata: row.metadata,
                    events,
                    compacted,
                })
            };
            async move { read.await.map_err(|e| (id, format!("{e:#}"))) }
        })
        .buffered(8);
    while let Some(recording) = reads.next().await {
        match recording {
            Ok(recording) => results.push(judge(recording)),
            Err((id, error)) => results.push(("database".into(), id, Outcome::Error(error))),
        }
    }
    drop(reads);
    let elapsed = started.elapsed();
    report(&results, elapsed, &args)
}

fn report(
    results: &[(String, Uuid, Outcome)],
    elapsed: Duration,
    args: &CheckArgs,
) -> anyhow::Result<ExitCode> {
    let (mut ok, mut diverged, mut skipped, mut errors, mut events) = (0, 0, 0, 0, 0);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut rows = Vec::new();
    for (source, id, outcome) in results {
        let row = match outcome {
            Outcome::Checked(report) => {
                events += report.events;
                match &report.divergence {
                    None => {
                        ok += 1;
                        if args.verbose && !args.json {
                            writeln!(
                                out,
                                "ok        {id}  {} events, {} decisions ({source})",
                                report.events, report.decisions
                            )?;
                        }
                        json!({ "session_id": id, "source": source, "result": "ok",
                                "events": report.events, "decisions": report.decisions })
                    }
                    Some(d) => {
                        diverged += 1;
                        if !args.json {
                            writeln!(
                                out,
                                "DIVERGED  {id}  at seq {} ({source}): {}",
                                d.seq, d.explanation
                            )?;
                            writeln!(out, "  recorded: {}", describe(d.recorded.as_ref()))?;
                            writeln!(out, "  current:  {}", describe(d.decided.as_ref()))?;
                        }
                        json!({ "session_id": id, "source": source, "result": "diverged",
                                "events": report.events, "decisions": report.decisions,
                                "divergence": d })
                    }
                }
            }
            Outcome::Skipped(why) => {
                skipped += 1;
                if !args.json {
                    writeln!(out, "skipped   {id}  {why} ({source})")?;
                }
                json!({ "session_id": id, "source": source, "result": "skipped", "reason": why })
            }
            Outcome::Error(why) => {
                errors += 1;
                if !args.json {
                    writeln!(out, "ERROR     {id}  {why} ({source})")?;
                }
                json!({ "session_id": id, "source": source, "result": "error", "error": why })
            }
        };
        rows.push(row);
    }
    let summary = json!({
        "sessions": results.len(),
        "events": events,
        "ok": ok,
        "diverged": diverged,
        "skipped": skipped,
        "errors": errors,
        "seconds": elapsed.as_secs_f64(),
    });
    if args.json {
        serde_json::to_writer_pretty(&mut out, &json!({ "sessions": rows, "summary": summary }))?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "checked {} sessions ({events} events) in {:.3} s: {ok} ok, {diverged} diverged, {skipped} skipped, {errors} errors",
            results.len(),
            elapsed.as_secs_f64()
        )?;
    }
    out.flush()?;
    Ok(if errors > 0 {
        ExitCode::from(2)
    } else if diverged > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn describe(event: Option<&Value>) -> String {
    match event {
        None => "(nothing)".into(),
        Some(e) => format!(
            "{} {}",
            e["kind"].as_str().unwrap_or_default(),
            clip(&e["payload"].to_string(), 200)
        ),
    }
}

//! `stead replay check`: re-drives the current agent loop's decisions over recorded journals
//! (from the database or exports) and reports, per session and in sum, where they diverge.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{json, Value};
use stead_actors::replay::{self, CheckReport};
use stead_actors::AgentRules;
use stead_persistence::{Event, Kv, SessionQuery, SessionStore};
use uuid::Uuid;

use super::output::clip;
use super::replay::read_export;
use super::CheckArgs;
use stead_config::Config;

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

pub(super) async fn check(
    config: &Config,
    store: &Arc<dyn SessionStore>,
    args: CheckArgs,
) -> anyhow::Result<ExitCode> {
    if args.ids.is_empty() && !args.all && args.file.is_empty() {
        bail!("name sessions, --all or --file FILE");
    }
    let started = Instant::now();
    // The rules as the server runs them: with the tools' argument schemas.
    let client = stead_agents::webhook_client()?;
    let notes: Arc<dyn Kv> = store.clone();
    let mut rules: HashMap<String, anyhow::Result<AgentRules>> = HashMap::new();
    for agent in &config.agents {
        rules.insert(
            agent.name.clone(),
            stead_agents::build_agent(agent, &notes, &client, None).map(|built| built.rules),
        );
    }
    let mut results: Vec<(String, Uuid, Outcome)> = Vec::new();
    let judge = |recording: Recording| {
        let outcome = if recording.compacted {
            Outcome::Skipped("the journal was compacted".into())
        } else {
            match rules.get(&recording.agent) {
                None => Outcome::Error(format!("agent `{}` is not configured", recording.agent)),
                Some(Err(e)) => Outcome::Error(format!("{e:#}")),
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
                    scope: stead_persistence::Scope::Installation,
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
                let events = replay::read_all(store.as_ref(), id, 0).await?;
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

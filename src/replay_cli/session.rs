//! `stead session list|show|tail|compact`: sessions and their journals, read from the
//! configured database, and compaction of ended sessions' journals.

use std::io::Write;
use std::time::Duration;

use anyhow::bail;
use serde_json::json;
use stead_actors::replay;
use stead_persistence::{SessionQuery, SessionStatus, SessionStore};
use uuid::Uuid;

use super::output::{event_json, human, print_json};
use super::{CompactArgs, ListArgs, ShowArgs, TailArgs};
use stead_config::Config;

pub(super) async fn list(store: &dyn SessionStore, args: ListArgs) -> anyhow::Result<()> {
    let status = args
        .status
        .as_deref()
        .map(str::parse::<SessionStatus>)
        .transpose()?;
    let page = store
        .list_sessions(&SessionQuery {
            scope: stead_persistence::Scope::Installation,
            agent: args.agent,
            parent: None,
            eval_run: None,
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

pub(super) async fn show(store: &dyn SessionStore, args: ShowArgs) -> anyhow::Result<()> {
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

pub(super) async fn tail(store: &dyn SessionStore, args: TailArgs) -> anyhow::Result<()> {
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

pub(super) async fn compact(
    config: &Config,
    store: &dyn SessionStore,
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

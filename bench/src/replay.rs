//! `stead bench replay`: how long `stead replay check --all` takes over many recorded sessions.
//!
//! Records N sessions of the built-in demo agent (about 50 events each: turns with an approved
//! destructive tool, a clock call and plain text) into a fresh database by driving the agent
//! loop's own decisions with scripted model outputs and tool results, then runs
//! `stead replay check --all` on it as a child process, as a user would, several times.

use std::process::Stdio;
use std::time::Instant;

use anyhow::Context;
use serde_json::json;
use stead_actors::{
    decide, AgentRules, ApprovalScope, CallStatus, Input, ModelOutput, SessionEvent, SessionState,
    Usage,
};
use stead_persistence::{NewEvent, NewSession, StoreOptions};

use crate::cli::ReplayBenchArgs;
use crate::BenchDatabase;
use stead_config::Config;

/// The shapes of turn a recorded session cycles through.
#[derive(Clone, Copy)]
enum TurnShape {
    /// The model asks for `forget` (always needs approval); approved; the tool runs.
    Approved,
    /// The model asks for `clock` (no approval); it runs.
    Clock,
    /// The model answers with text only.
    Text,
}

const SHAPES: [TurnShape; 5] = [
    TurnShape::Approved,
    TurnShape::Clock,
    TurnShape::Text,
    TurnShape::Approved,
    TurnShape::Clock,
];

/// Records one session's journal by running the agent loop's decisions over scripted inputs.
pub fn record(session_id: &str, rules: &AgentRules, min_events: usize) -> Vec<SessionEvent> {
    let mut state = SessionState::default();
    let mut events = Vec::new();
    let push = |state: &mut SessionState, events: &mut Vec<SessionEvent>, e: SessionEvent| {
        state.apply(state.last_seq + 1, &e);
        events.push(e);
    };
    push(
        &mut state,
        &mut events,
        SessionEvent::SessionCreated {
            agent: "demo".into(),
            principal: None,
            parent: None,
        },
    );
    let step = |state: &mut SessionState, events: &mut Vec<SessionEvent>, input: Input| {
        let decision = decide(state, session_id, input, rules).expect("scripted input is valid");
        for e in decision.events {
            push(state, events, e);
        }
    };
    let output = |text: &str, tool_calls: Vec<(String, serde_json::Value)>| ModelOutput {
        text: text.into(),
        tool_calls,
        usage: Usage {
            prompt_tokens: 120,
            completion_tokens: 12,
        },
        provider: "local".into(),
        model: "smollm2-135m-instruct".into(),
        latency_ms: 250.0,
        ttft_ms: 40.0,
        cost: 0.0,
        guardrails: Vec::new(),
    };
    let model_call = |state: &SessionState| {
        state
            .turn
            .as_ref()
            .and_then(|t| t.model_call.clone())
            .expect("a model call is in flight")
    };
    let call_in = |state: &SessionState, pick: fn(&CallStatus) -> bool| {
        state
            .turn
            .as_ref()
            .and_then(|t| t.calls.iter().find(|c| pick(&c.status)))
            .map(|c| c.call_id.clone())
            .expect("a tool call in that state")
    };
    let mut turn = 0;
    while events.len() < min_events {
        let shape = SHAPES[turn % SHAPES.len()];
        turn += 1;
        step(
            &mut state,
            &mut events,
            Input::UserMessage {
                text: format!("request {turn}"),
                client_id: Some(format!("c{turn}")),
                mode: None,
                attachments: Vec::new(),
            },
        );
        let tool = match shape {
            TurnShape::Approved => Some((
                "forget",
                json!({ "op": "delete", "key": format!("note-{turn}") }),
            )),
            TurnShape::Clock => Some(("clock", json!({}))),
            TurnShape::Text => None,
        };
        if let Some((tool, arguments)) = tool {
            let call_id = model_call(&state);
            step(
                &mut state,
                &mut events,
                Input::ModelFinished {
                    call_id,
                    output: output("", vec![(tool.into(), arguments)]),
                },
            );
            if matches!(shape, TurnShape::Approved) {
                let call_id = call_in(&state, |s| matches!(s, CallStatus::AwaitingApproval { .. }));
                step(
                    &mut state,
                    &mut events,
                    Input::Decision {
                        call_id,
                        approved: true,
                        reason: None,
                        decided_by: "operator".into(),
                        scope: ApprovalScope::Once,
                        args_hash: None,
                        overspend_usd: None,
                        may_spend: true,
                    },
                );
            }
            let call_id = call_in(&state, |s| matches!(s, CallStatus::Started { .. }));
            step(
                &mut state,
                &mut events,
                Input::ToolFinished {
                    call_id,
                    result: json!({ "ok": true }),
                },
            );
        }
        let call_id = model_call(&state);
        step(
            &mut state,
            &mut events,
            Input::ModelFinished {
                call_id,
                output: output(&format!("done with request {turn}"), Vec::new()),
            },
        );
    }
    events
}

pub async fn replay(config: Config, args: ReplayBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.sessions > 0, "--sessions must be at least 1");
    anyhow::ensure!(args.runs > 0, "--runs must be at least 1");
    // The recordings and the check both use the built-in demo agent.
    let builtin = Config::default();
    let rules = stead_agents::rules(&builtin.agents[0])?;
    let database = BenchDatabase::create(&config, args.backend).await?;
    let outcome = async {
        let store = stead_persistence::open(StoreOptions::new(database.url.clone())).await?;
        let started = Instant::now();
        let mut total_events = 0;
        for i in 0..args.sessions {
            let row = store.create_session(NewSession::for_agent("demo")).await?;
            let events = record(&row.id.to_string(), &rules, args.events);
            total_events += events.len();
            let rows = events
                .iter()
                .map(|e| {
                    let (kind, payload) = e.to_parts();
                    NewEvent::new(kind, payload)
                })
                .collect();
            store.append(row.id, 0, rows).await?;
            store.close_session(row.id).await?;
            if (i + 1) % 100 == 0 {
                eprint!("\rrecorded {}/{} sessions", i + 1, args.sessions);
            }
        }
        eprintln!(
            "\rrecorded {} sessions, {total_events} events in {:.1} s",
            args.sessions,
            started.elapsed().as_secs_f64()
        );
        store.shutdown().await;
        let exe = std::env::current_exe().context("cannot find the stead binary")?;
        let scratch_dir = tempfile_dir(&config)?;
        let mut seconds = Vec::new();
        for run in 0..args.runs {
            let started = Instant::now();
            let output = tokio::process::Command::new(&exe)
                .args(["replay", "check", "--all", "--json", "--database-url"])
                .arg(database.url_text())
                .arg("--data-dir")
                .arg(&scratch_dir)
                .current_dir(&scratch_dir)
                .env_remove("STEAD_CONFIG")
                .stdin(Stdio::null())
                .output()
                .await?;
            let elapsed = started.elapsed().as_secs_f64();
            anyhow::ensure!(
                output.status.success(),
                "replay check failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            let report: serde_json::Value = serde_json::from_slice(&output.stdout)?;
            let summary = &report["summary"];
            anyhow::ensure!(
                summary["ok"] == args.sessions,
                "not every session passed: {summary}"
            );
            eprintln!(
                "run {}: {elapsed:.3} s wall ({:.3} s inside the check)",
                run + 1,
                summary["seconds"].as_f64().unwrap_or_default()
            );
            seconds.push((elapsed, summary["seconds"].as_f64().unwrap_or_default()));
        }
        let _ = std::fs::remove_dir_all(&scratch_dir);
        anyhow::Ok((total_events, seconds))
    }
    .await;
    database.remove().await?;
    let (total_events, mut seconds) = outcome?;
    seconds.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (wall, inside) = seconds[seconds.len() / 2];
    let per_100 = wall / args.sessions as f64 * 100.0;
    println!(
        "replay bench: backend {:?} · {} sessions · {} events ({:.1} per session) · {} runs",
        args.backend,
        args.sessions,
        total_events,
        total_events as f64 / args.sessions as f64,
        args.runs
    );
    println!(
        "  `stead replay check --all`: median {wall:.3} s wall (process start to exit), {inside:.3} s checking"
    );
    println!(
        "  = {per_100:.3} s per 100 sessions (target < 1 s) · {:.0} events/s",
        total_events as f64 / inside.max(1e-9)
    );
    Ok(())
}

/// An empty directory under the data directory for the child's `--data-dir`.
fn tempfile_dir(config: &Config) -> anyhow::Result<std::path::PathBuf> {
    let dir = config
        .server
        .data_dir
        .join(format!("bench-replay-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(std::path::absolute(&dir)?)
}

//! `stead bench sessions`: what a parked session costs, how fast a long session activates, and
//! the latency of a durable step through a session actor.
//!
//! Uses a scratch SQLite database in the data dir and a scripted model (instant answers), so
//! the figures are the actors' and the journal's, not a model's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use hdrhistogram::Histogram;
use serde_json::json;
use stead_actors::session::{Agent, Lifecycle, ModelClient, ModelRequest, SessionRegistry};
use stead_actors::{AgentRules, Input, ModelOutput, SessionEvent, Usage};
use stead_persistence::{DatabaseUrl, NewEvent, NewSession, StoreOptions};
use tokio::sync::mpsc::UnboundedSender;

use crate::cli::SessionsBenchArgs;
use stead_config::prepare_data_dir;
use stead_config::Config;

/// Answers every model call at once with a short text.
pub(crate) struct InstantModel;

#[async_trait]
impl ModelClient for InstantModel {
    async fn complete(
        &self,
        request: ModelRequest,
        _deltas: UnboundedSender<String>,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> Result<ModelOutput, stead_actors::session::ModelError> {
        Ok(ModelOutput {
            text: "ok".into(),
            tool_calls: Vec::new(),
            usage: Usage {
                prompt_tokens: request.transcript.len() as u64,
                completion_tokens: 1,
            },
            provider: "bench".into(),
            model: "instant".into(),
            latency_ms: 0.0,
            ttft_ms: 0.0,
            cost: 0.0,
            guardrails: Vec::new(),
        })
    }
}

pub(crate) fn agent() -> Agent {
    Agent {
        name: "bench".into(),
        system_prompt: String::new(),
        rules: AgentRules {
            route: "default".into(),
            max_steps: 4,
            tools: Default::default(),
            approval_timeout: None,
            dynamic: Vec::new(),
            message_mode: Default::default(),
            schedules: Default::default(),
            callbacks: Default::default(),
            delegation: Default::default(),
            context: Default::default(),
        },
        tools: Default::default(),
        dynamic: None,
        guardrails: None,
    }
}

/// One decision's cost against the session's length: `decide` for a user message (which
/// starts a turn: two events) on a state folded from `length` events of whole turns, and, for
/// comparison, a copy of the transcript as a `Vec` (what each decision cost when the state held
/// plain collections and `decide` cloned it whole).
fn step_cost(lengths: &[usize]) {
    println!("step cost against session length (decide for a user message, in process)");
    let rules = agent().rules;
    for &length in lengths {
        let mut state = stead_actors::SessionState::default();
        let fold = |state: &mut stead_actors::SessionState, event: SessionEvent| {
            let seq = state.last_seq + 1;
            state.apply(seq, &event);
        };
        fold(
            &mut state,
            SessionEvent::SessionCreated {
                agent: "bench".into(),
                principal: None,
                parent: None,
            },
        );
        let mut turn = 0u64;
        while (state.last_seq as usize) + 5 <= length.max(6) {
            turn += 1;
            fold(
                &mut state,
                SessionEvent::UserMessage {
                    text: format!("question {turn} about the rows of last week"),
                    client_id: Some(format!("c{turn}")),
                    mode: None,
                    schedule: None,
                    attachments: Vec::new(),
                },
            );
            fold(
                &mut state,
                SessionEvent::ModelCallStarted {
                    call_id: format!("m{turn}").into(),
                    route: "default".into(),
                    model: "default".into(),
                },
            );
            fold(
                &mut state,
                SessionEvent::ModelCallFinished {
                    call_id: format!("m{turn}").into(),
                    text: "an answer of a few words, as models give".into(),
                    tool_calls: Vec::new(),
                    usage: Usage {
                        prompt_tokens: 40,
                        completion_tokens: 12,
                    },
                    provider: "bench".into(),
                    model: "instant".into(),
                    latency_ms: 1.0,
                    ttft_ms: 1.0,
                    cost: 0.0,
                    guardrails: Vec::new(),
                },
            );
            fold(
                &mut state,
                SessionEvent::AssistantMessage {
                    text: "an answer of a few words, as models give".into(),
                    fallback: false,
                },
            );
            fold(
                &mut state,
                SessionEvent::TurnFinished {
                    reason: stead_actors::TurnEnd::Completed,
                },
            );
        }
        let input = || Input::UserMessage {
            text: "one more question".into(),
            client_id: Some("next".into()),
            mode: None,
            attachments: Vec::new(),
        };
        let reps = 2_000u32;
        let started = Instant::now();
        for _ in 0..reps {
            let decision = stead_actors::decide(&state, "bench", input(), &rules);
            std::hint::black_box(decision.ok());
        }
        let decide_us = started.elapsed().as_secs_f64() * 1e6 / reps as f64;
        let copies = 20u32;
        let started = Instant::now();
        for _ in 0..copies {
            let copy: Vec<stead_actors::TranscriptEntry> =
                state.transcript.iter().cloned().collect();
            std::hint::black_box(copy);
        }
        let copy_us = started.elapsed().as_secs_f64() * 1e6 / copies as f64;
        println!(
            "  {:>7} events ({:>6} transcript entries): decide {decide_us:>8.2} µs · a Vec copy of the transcript {copy_us:>10.1} µs",
            state.last_seq,
            state.transcript.len()
        );
    }
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

/// A parked turn: the model asked for a tool that waits for approval.
fn parked_turn() -> Vec<NewEvent> {
    let events = [
        SessionEvent::UserMessage {
            text: "delete the old rows".into(),
            client_id: None,
            mode: None,
            schedule: None,
            attachments: Vec::new(),
        },
        SessionEvent::ModelCallStarted {
            call_id: "m1".into(),
            route: "default".into(),
            model: "default".into(),
        },
        SessionEvent::ModelCallFinished {
            call_id: "m1".into(),
            text: String::new(),
            tool_calls: vec![stead_actors::RequestedCall {
                call_id: "t1".into(),
                tool: "delete_records".into(),
                arguments: json!({"table": "events"}),
            }],
            usage: Usage {
                prompt_tokens: 40,
                completion_tokens: 12,
            },
            provider: "bench".into(),
            model: "instant".into(),
            latency_ms: 1.0,
            ttft_ms: 1.0,
            cost: 0.0,
            guardrails: Vec::new(),
        },
        SessionEvent::ToolCallRequested {
            call_id: "t1".into(),
            tool: "delete_records".into(),
            arguments: json!({"table": "events"}),
        },
        SessionEvent::ApprovalRequested {
            call_id: "t1".into(),
            tool: "delete_records".into(),
            arguments: json!({"table": "events"}),
            args_hash: stead_actors::args_hash(&json!({"table": "events"})),
            reason: "this tool always needs approval".into(),
        },
    ];
    events
        .iter()
        .map(|e| {
            let (k, p) = e.to_parts();
            NewEvent::new(k, p)
        })
        .collect()
}

pub async fn sessions(config: Config, args: SessionsBenchArgs) -> anyhow::Result<()> {
    step_cost(&args.step_lengths);
    if args.step_cost_only {
        return Ok(());
    }
    prepare_data_dir(&config.server.data_dir)?;
    let file = config.server.data_dir.join(format!(
        "bench-sessions-{}.db",
        uuid::Uuid::new_v4().simple()
    ));
    let result = run(&file, &args).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
    result
}

/// The targets for a parked session (docs/benchmarks.md).
const PARKED_KIB: f64 = 2.0;
const REACTIVATION_P99_MS: f64 = 5.0;

async fn run(file: &std::path::Path, args: &SessionsBenchArgs) -> anyhow::Result<()> {
    let store =
        stead_persistence::open(StoreOptions::new(DatabaseUrl::Sqlite(file.to_path_buf()))).await?;

    // 1. Parked sessions, all live at once (no idle passivation during the run: RSS is read
    //    with every actor alive, and divided by the actors actually alive), then stopped, then
    //    a thousand of them activated again, each timed.
    eprintln!("creating {} parked sessions…", args.parked);
    let started = Instant::now();
    let ids = create_parked(&store, args.parked).await?;
    eprintln!("\r  created in {:.1} s", started.elapsed().as_secs_f64());
    let lifecycle = Lifecycle {
        snapshot_every: 100,
        passivate_after: Duration::from_secs(3600),
        ..Lifecycle::default()
    };
    let registry = SessionRegistry::new(store.clone(), Arc::new(InstantModel), vec![agent()])
        .with_lifecycle(lifecycle);
    let base_rss = rss_bytes();
    let started = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let state = registry.state(*id).await?;
        anyhow::ensure!(
            state.status() == stead_persistence::SessionStatus::AwaitingApproval,
            "session {id} is not parked"
        );
        if i % 5000 == 0 {
            eprint!("\r  activating: {i}/{}", ids.len());
        }
    }
    let activate_all = started.elapsed().as_secs_f64();
    let live_rss = rss_bytes();
    let live = ids.iter().filter(|id| registry.is_live(**id)).count();
    eprintln!("\r  {live} parked actors live; stopping them…");
    registry.stop_all();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let passivated = ids.iter().filter(|id| !registry.is_live(**id)).count();
    registry.prune();
    let passive_rss = rss_bytes();
    let mut reactivation = Histogram::<u64>::new(3)?;
    for id in ids.iter().take(1_000) {
        let started = Instant::now();
        registry.state(*id).await?;
        reactivation.record(started.elapsed().as_micros() as u64)?;
    }
    registry.stop_all();

    // 2. Activation of a long session, with and without a snapshot.
    eprintln!("activation of a session with {} events…", args.long_events);
    let long = write_long_session(&store, args.long_events).await?;
    let cold = Lifecycle {
        snapshot_every: i64::MAX,
        passivate_after: Duration::from_secs(3600),
        ..Lifecycle::default()
    };
    let timed_activation = |registry: SessionRegistry| async move {
        let started = Instant::now();
        let state = registry.state(long).await?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        registry.stop_all();
        anyhow::Ok((ms, state.last_seq))
    };
    let (replay_ms, folded) = timed_activation(
        SessionRegistry::new(store.clone(), Arc::new(InstantModel), vec![agent()])
            .with_lifecycle(cold),
    )
    .await?;
    // Write a snapshot at the end (as a live actor would every N events) and activate again.
    let mut state = stead_actors::SessionState::default();
    for event in store.read(long, 0, u32::MAX).await? {
        state.apply(
            event.seq,
            &SessionEvent::from_parts(&event.kind, &event.payload).context("kind")?,
        );
    }
    store
        .put_snapshot(
            long,
            state.last_seq,
            json!({ "version": 1, "state": state }),
        )
        .await?;
    let (snapshot_ms, _) = timed_activation(
        SessionRegistry::new(store.clone(), Arc::new(InstantModel), vec![agent()])
            .with_lifecycle(cold),
    )
    .await?;

    // 3. Durable step latency: a user message through the actor to its committed events.
    eprintln!("durable steps: {} turns…", args.turns);
    let registry = SessionRegistry::new(store.clone(), Arc::new(InstantModel), vec![agent()])
        .with_lifecycle(cold);
    let id = store
        .create_session(NewSession::for_agent("bench"))
        .await?
        .id;
    let latencies = durable_steps(&registry, id, args.turns).await?;
    registry.stop_all();
    store.shutdown().await;

    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!("sessions bench (SQLite, scripted model)");
    let per_live = live_rss.saturating_sub(base_rss) as f64 / 1024.0 / live.max(1) as f64;
    println!(
        "  {live} of {} parked sessions live at once: RSS {:.0} MiB over a {:.0} MiB base = {per_live:.2} KiB per live actor (activated in {activate_all:.1} s); target ≤ {PARKED_KIB} KiB ({:.2}× the target)",
        ids.len(), mb(live_rss), mb(base_rss), per_live / PARKED_KIB
    );
    println!(
        "  after stopping them: {passivated}/{} stopped, RSS {:.0} MiB",
        ids.len(),
        mb(passive_rss)
    );
    let p99 = reactivation.value_at_quantile(0.99) as f64 / 1e3;
    println!(
        "  re-activation of a stopped parked session ({} timed): p50 {:.2} ms · p99 {p99:.2} ms; target p99 ≤ {REACTIVATION_P99_MS} ms ({:.2}× the target)",
        reactivation.len(),
        reactivation.value_at_quantile(0.5) as f64 / 1e3,
        p99 / REACTIVATION_P99_MS
    );
    println!("  activation of a {folded}-event session: {replay_ms:.1} ms by replay, {snapshot_ms:.1} ms from a snapshot");
    println!(
        "  durable step (user message → committed): p50 {:.3} ms · p99 {:.3} ms",
        latencies.value_at_quantile(0.5) as f64 / 1e3,
        latencies.value_at_quantile(0.99) as f64 / 1e3
    );
    Ok(())
}

/// `parked` sessions, each with a turn parked on an approval (journaled directly).
async fn create_parked(
    store: &Arc<dyn stead_persistence::JournalStore>,
    parked: usize,
) -> anyhow::Result<Vec<uuid::Uuid>> {
    let mut ids = Vec::with_capacity(parked);
    let mut pending = Vec::new();
    for i in 0..parked {
        let id = store
            .create_session(NewSession::for_agent("bench"))
            .await?
            .id;
        ids.push(id);
        let store = store.clone();
        pending.push(tokio::spawn(async move {
            store.append(id, 0, parked_turn()).await
        }));
        if pending.len() >= 256 {
            for task in pending.drain(..) {
                task.await??;
            }
            eprint!("\r  progress: {}/{} sessions", i + 1, parked);
        }
    }
    for task in pending.drain(..) {
        task.await??;
    }
    Ok(ids)
}

/// A session of about `events` events (finished turns), journaled directly.
async fn write_long_session(
    store: &Arc<dyn stead_persistence::JournalStore>,
    events: usize,
) -> anyhow::Result<uuid::Uuid> {
    let long = store
        .create_session(NewSession::for_agent("bench"))
        .await?
        .id;
    let mut seq = 0;
    while seq < events as i64 {
        let mut batch = Vec::new();
        for turn in 0..50 {
            for event in [
                SessionEvent::UserMessage {
                    text: format!("question {}", seq + turn),
                    client_id: None,
                    mode: None,
                    schedule: None,
                    attachments: Vec::new(),
                },
                SessionEvent::TurnFinished {
                    reason: stead_actors::TurnEnd::Completed,
                },
            ] {
                let (k, p) = event.to_parts();
                batch.push(NewEvent::new(k, p));
            }
        }
        seq = *store
            .append(long, seq, batch)
            .await?
            .last()
            .context("append")?;
    }
    Ok(long)
}

/// The latency of `turns` user messages, each sent once the previous turn ended, from the
/// send to its committed events.
async fn durable_steps(
    registry: &SessionRegistry,
    id: uuid::Uuid,
    turns: usize,
) -> anyhow::Result<Histogram<u64>> {
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for i in 0..turns {
        loop {
            let state = registry.state(id).await?;
            if state.turn.is_none() {
                break;
            }
            tokio::task::yield_now().await;
        }
        let started = Instant::now();
        registry
            .send(
                id,
                Input::UserMessage {
                    text: format!("step {i}"),
                    client_id: None,
                    mode: None,
                    attachments: Vec::new(),
                },
            )
            .await?;
        latencies.saturating_record(started.elapsed().as_micros() as u64);
    }
    Ok(latencies)
}

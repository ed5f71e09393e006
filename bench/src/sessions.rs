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

/// A finished model call as the bench's journals hold it (the scripted model's figures).
pub(crate) fn finished_call(
    call_id: String,
    text: String,
    tool_calls: Vec<stead_actors::RequestedCall>,
    prompt_tokens: u64,
) -> SessionEvent {
    SessionEvent::ModelCallFinished {
        call_id: call_id.into(),
        text,
        tool_calls,
        usage: Usage {
            prompt_tokens,
            completion_tokens: 12,
        },
        provider: "bench".into(),
        model: "instant".into(),
        latency_ms: 1.0,
        ttft_ms: 1.0,
        cost: 0.0,
        guardrails: Vec::new(),
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

pub async fn sessions(config: Config, args: SessionsBenchArgs) -> anyhow::Result<()> {
    prepare_data_dir(&config.server.data_dir)?;
    if args.step_cost_only {
        return crate::step_cost::step_cost(&config.server.data_dir, &args).await;
    }
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

async fn run(file: &std::path::Path, args: &SessionsBenchArgs) -> anyhow::Result<()> {
    let store =
        stead_persistence::open(StoreOptions::new(DatabaseUrl::Sqlite(file.to_path_buf()))).await?;

    // 1. Parked sessions: as the product keeps them, as live actors, and re-activated.
    crate::parked::parked(&store, args.parked).await?;

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

    println!("sessions bench (SQLite, scripted model)");
    println!("  activation of a {folded}-event session: {replay_ms:.1} ms by replay, {snapshot_ms:.1} ms from a snapshot");
    println!(
        "  durable step (user message → committed): p50 {:.3} ms · p99 {:.3} ms",
        latencies.value_at_quantile(0.5) as f64 / 1e3,
        latencies.value_at_quantile(0.99) as f64 / 1e3
    );
    Ok(())
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

//! `stead bench sessions --step-cost-only`: what one step costs against the session's length —
//! whole turns through a session actor (user message, model call, answer, turn end; the
//! journal, snapshots and the model request included) on sessions of each `--step-lengths`
//! events, and `decide` alone in process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use serde_json::json;
use stead_actors::events::Compaction;
use stead_actors::session::{Frame, Lifecycle, SessionRegistry, SharedFrame};
use stead_actors::{Input, SessionEvent};
use stead_persistence::{DatabaseUrl, JournalStore, NewEvent, NewSession, StoreOptions};

use crate::cli::SessionsBenchArgs;
use crate::sessions::{agent, finished_call, InstantModel};

/// The target: a step at the longest length costs at most this many times one at the shortest.
const FLAT_RATIO: f64 = 1.2;

/// Turns of a history between two compactions, and the turns each keeps (a prompt budget
/// makes every long session compact; `--no-compaction` measures one that never does).
const TURNS_PER_COMPACTION: usize = 40;
const TURNS_KEPT: usize = 4;

pub(crate) async fn step_cost(
    data_dir: &std::path::Path,
    args: &SessionsBenchArgs,
) -> anyhow::Result<()> {
    decide_cost(&args.step_lengths);
    let file = data_dir.join(format!("bench-steps-{}.db", uuid::Uuid::new_v4().simple()));
    let result = whole_steps(&file, args).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
    result
}

async fn whole_steps(file: &std::path::Path, args: &SessionsBenchArgs) -> anyhow::Result<()> {
    let store =
        stead_persistence::open(StoreOptions::new(DatabaseUrl::Sqlite(file.to_path_buf()))).await?;
    let compacting = !args.no_compaction;
    println!(
        "whole steps against session length (through the actor, SQLite, scripted model; {})",
        if compacting {
            "the history compacted as a prompt budget would"
        } else {
            "never compacted: the whole transcript in every request"
        }
    );
    let mut p50s = Vec::new();
    for &length in &args.step_lengths {
        eprintln!("writing a session of {length} events…");
        let id = write_history(&store, length, compacting).await?;
        let registry = SessionRegistry::new(store.clone(), Arc::new(InstantModel), vec![agent()])
            .with_lifecycle(Lifecycle {
                passivate_after: Duration::from_secs(3600),
                ..Lifecycle::default()
            });
        let transcript = registry.state(id).await?.transcript.len();
        let mut frames = registry.subscribe(id).await?;
        let mut steps = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
        let warm = 20;
        for turn in 0..warm + args.turns {
            let started = Instant::now();
            registry
                .send(
                    id,
                    Input::UserMessage {
                        text: format!("step {turn}: one more question about last week"),
                        client_id: Some(format!("step-{turn}")),
                        mode: None,
                        attachments: Vec::new(),
                    },
                )
                .await?;
            turn_finished(&mut frames).await?;
            if turn >= warm {
                steps.saturating_record(started.elapsed().as_micros() as u64);
            }
        }
        registry.stop_all();
        let (p50, p99) = (
            steps.value_at_quantile(0.5) as f64 / 1e3,
            steps.value_at_quantile(0.99) as f64 / 1e3,
        );
        println!(
            "  {length:>7} events ({transcript:>6} transcript entries): a whole turn p50 {p50:.3} ms · p99 {p99:.3} ms ({} timed)",
            steps.len()
        );
        p50s.push(p50);
    }
    if let (Some(first), Some(last)) = (p50s.first(), p50s.last()) {
        let ratio = last / first.max(1e-9);
        println!(
            "  longest / shortest p50: {ratio:.2}×; target ≤ {FLAT_RATIO}× ({})",
            if ratio <= FLAT_RATIO { "met" } else { "missed" }
        );
    }
    store.shutdown().await;
    Ok(())
}

/// Waits for the running turn's `turn_finished` frame.
async fn turn_finished(
    frames: &mut tokio::sync::mpsc::Receiver<SharedFrame>,
) -> anyhow::Result<()> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), frames.recv())
            .await
            .context("no turn_finished within 30 s")?
            .context("the session's frames ended")?;
        if matches!(&*frame, Frame::Event { event, .. } if matches!(**event, SessionEvent::TurnFinished { .. }))
        {
            return Ok(());
        }
    }
}

/// One finished turn of a history: a user message (with a client id), a model call and its
/// answer.
fn history_turn(turn: usize) -> [SessionEvent; 5] {
    let call_id = format!("h{turn}");
    let answer = format!("answer {turn}: a few words, as models give");
    [
        SessionEvent::UserMessage {
            text: format!("question {turn} about the rows of last week"),
            client_id: Some(format!("history-{turn}")),
            mode: None,
            schedule: None,
            attachments: Vec::new(),
        },
        SessionEvent::ModelCallStarted {
            call_id: call_id.clone().into(),
            route: "default".into(),
            model: "default".into(),
        },
        finished_call(call_id, answer.clone(), Vec::new(), 400),
        SessionEvent::AssistantMessage {
            text: answer,
            fallback: false,
        },
        SessionEvent::TurnFinished {
            reason: stead_actors::TurnEnd::Completed,
        },
    ]
}

/// A session of about `events` events of finished turns, compacted every
/// [`TURNS_PER_COMPACTION`] turns when `compacting`, and a snapshot at its end (as its actor
/// would have written one), journaled directly.
async fn write_history(
    store: &Arc<dyn JournalStore>,
    events: usize,
    compacting: bool,
) -> anyhow::Result<uuid::Uuid> {
    let id = store
        .create_session(NewSession::for_agent("bench"))
        .await?
        .id;
    let mut state = stead_actors::SessionState::default();
    let mut batch: Vec<SessionEvent> = vec![SessionEvent::SessionCreated {
        agent: "bench".into(),
        principal: None,
        parent: None,
    }];
    let mut turn = 0;
    while (state.last_seq as usize) + batch.len() < events {
        turn += 1;
        batch.extend(history_turn(turn));
        if compacting && turn % TURNS_PER_COMPACTION == 0 {
            let entries = (state.transcript.len() + 2 * TURNS_PER_COMPACTION)
                .saturating_sub(2 * TURNS_KEPT) as u64;
            batch.push(SessionEvent::ContextCompacted(Compaction {
                call_id: format!("c{turn}").into(),
                entries,
                turns: (TURNS_PER_COMPACTION - TURNS_KEPT) as u32,
                summary: Some(format!(
                    "The user asked {turn} questions about last week's rows."
                )),
                model: Some("instant".into()),
                tokens_before: 1_000,
                tokens_after: 300,
            }));
        }
        if batch.len() >= 500 {
            append(store, id, &mut state, &mut batch).await?;
            if state.last_seq % 10_000 < 500 {
                eprint!("\r  {}/{events} events", state.last_seq);
            }
        }
    }
    append(store, id, &mut state, &mut batch).await?;
    eprintln!();
    store
        .put_snapshot(id, state.last_seq, json!({ "version": 1, "state": state }))
        .await?;
    Ok(id)
}

async fn append(
    store: &Arc<dyn JournalStore>,
    id: uuid::Uuid,
    state: &mut stead_actors::SessionState,
    batch: &mut Vec<SessionEvent>,
) -> anyhow::Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let rows = batch
        .iter()
        .map(|e| {
            let (k, p) = e.to_parts();
            NewEvent::new(k, p)
        })
        .collect();
    let seqs = store.append(id, state.last_seq, rows).await?;
    for (seq, event) in seqs.iter().zip(batch.drain(..)) {
        state.apply(*seq, &event);
    }
    Ok(())
}

/// One decision's cost against the session's length: `decide` for a user message (which
/// starts a turn: two events) on a state folded from `length` events of whole turns, and, for
/// comparison, a copy of the transcript as a `Vec` (what each decision cost when the state held
/// plain collections and `decide` cloned it whole).
fn decide_cost(lengths: &[usize]) {
    println!("step cost against session length (decide for a user message, in process)");
    let rules = crate::sessions::agent().rules;
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
                finished_call(
                    format!("m{turn}"),
                    "an answer of a few words, as models give".into(),
                    Vec::new(),
                    40,
                ),
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

//! `stead bench eval`: the evaluation engine's throughput. `--cases` sessions of the demo agent
//! are recorded on a model double (a test double answering after `--model-ms`: a calculator
//! call for the question, then the answer), made a dataset, and the dataset is run twice in
//! replay mode — one case at a time, then `--concurrency` at a time — on the same store. The
//! figure is cases per second of each, and their ratio (the target: ≥ 5× at concurrency 8).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use serde_json::json;
use stead_actors::session::{ModelClient, ModelError, ModelRequest, SessionRegistry};
use stead_actors::{Input, ModelOutput, TranscriptEntry, Usage};
use stead_config::Config;
use stead_evals::run::{RunSettings, Runner};
use stead_evals::Case;
use stead_persistence::{JournalStore, NewSession, StoreOptions};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::cli::EvalBenchArgs;

/// A model double: a calculator call for a question, the result read back as the answer.
struct Calculating {
    delay: Duration,
}

#[async_trait]
impl ModelClient for Calculating {
    async fn complete(
        &self,
        request: ModelRequest,
        _deltas: UnboundedSender<String>,
        cancel: CancellationToken,
    ) -> Result<ModelOutput, ModelError> {
        tokio::select! {
            () = cancel.cancelled() => return Err(ModelError::Cancelled),
            () = tokio::time::sleep(self.delay) => {}
        }
        let (text, tool_calls) = match request.transcript.last() {
            Some(TranscriptEntry::User { text, .. }) => {
                let n: String = text.chars().filter(char::is_ascii_digit).collect();
                (
                    String::new(),
                    vec![(
                        "calculator".to_string(),
                        json!({ "expression": format!("{n} * 7") }),
                    )],
                )
            }
            // The value, not the whole result: PostgreSQL's `jsonb` keeps a result's keys in
            // its own order (docs/evals.md), and the answer must not depend on it.
            Some(TranscriptEntry::Tool { content, .. }) => {
                (format!("The answer is {}.", content["value"]), Vec::new())
            }
            _ => ("Hello.".to_string(), Vec::new()),
        };
        Ok(ModelOutput {
            text,
            tool_calls,
            usage: Usage {
                prompt_tokens: 100,
                completion_tokens: 10,
            },
            provider: "double".into(),
            model: "double".into(),
            latency_ms: self.delay.as_secs_f64() * 1000.0,
            ttft_ms: self.delay.as_secs_f64() * 1000.0,
            cost: 0.0,
            guardrails: Vec::new(),
        })
    }
}

pub async fn evals(config: Config, args: EvalBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.cases > 0, "--cases must be at least 1");
    let database = crate::BenchDatabase::create(&config, args.backend).await?;
    let store = stead_persistence::open(StoreOptions::new(database.url.clone())).await?;
    let outcome = measure(&store, &args).await;
    store.shutdown().await;
    database.remove().await?;
    let (sequential, concurrent, passed) = outcome?;
    let rate = |d: Duration| args.cases as f64 / d.as_secs_f64();
    let ratio = rate(concurrent) / rate(sequential);
    let figures = json!({
        "backend": format!("{:?}", args.backend).to_lowercase(),
        "cases": args.cases,
        "model_ms": args.model_ms,
        "concurrency": args.concurrency,
        "sequential_cases_per_s": rate(sequential),
        "concurrent_cases_per_s": rate(concurrent),
        "ratio": ratio,
        "passed": passed,
        "target_ratio": 5.0,
    });
    if args.json {
        println!("{figures}");
    } else {
        println!(
            "{} cases on a {} ms model double ({:?}): one at a time {:.1} cases/s, {} at a time \
             {:.1} cases/s — {ratio:.2}× (target ≥ 5×); {passed}/{} passed in each run",
            args.cases,
            args.model_ms,
            args.backend,
            rate(sequential),
            args.concurrency,
            rate(concurrent),
            args.cases,
        );
    }
    Ok(())
}

/// Records the sessions, makes the dataset, runs it twice; the two runs' wall times and the
/// cases that passed in both.
async fn measure(
    store: &Arc<dyn JournalStore>,
    args: &EvalBenchArgs,
) -> anyhow::Result<(Duration, Duration, usize)> {
    let defaults = Config::default();
    let demo = defaults.agents.first().context("no built-in agent")?;
    let notes: Arc<dyn stead_persistence::Kv> = store.clone();
    let agent = stead_agents::build_agent(demo, &notes, &stead_agents::webhook_client()?, None)?;
    let model = Arc::new(Calculating {
        delay: Duration::from_millis(args.model_ms),
    });
    let registry = Arc::new(SessionRegistry::new(store.clone(), model, vec![agent]));
    eprintln!("recording {} sessions…", args.cases);
    let mut cases = Vec::new();
    for i in 0..args.cases {
        let row = store.create_session(NewSession::for_agent("demo")).await?;
        let input = Input::UserMessage {
            text: format!("What is {} times 7?", 100 + i),
            client_id: None,
            mode: None,
            attachments: Vec::new(),
        };
        registry.send(row.id, input).await?;
        wait_idle(&registry, row.id).await?;
        let events = stead_actors::replay::read_all(store.as_ref(), row.id, 0).await?;
        cases.push(Case::from_journal(
            "demo",
            row.id,
            &events,
            None,
            Vec::new(),
        )?);
        registry.stop(row.id).await;
    }
    store
        .create_dataset(stead_persistence::DEFAULT_PROJECT, "bench")
        .await?;
    let rows: Vec<_> = cases
        .iter()
        .map(|c| Ok((c.id, serde_json::to_value(c)?)))
        .collect::<anyhow::Result<_>>()?;
    store
        .add_cases(stead_persistence::DEFAULT_PROJECT, "bench", &rows)
        .await?;
    let runner = Runner {
        sessions: store.clone(),
        evals: store.clone(),
        registry: registry.clone(),
        judge: None,
    };
    let mut times = Vec::new();
    let mut passed = Vec::new();
    for concurrency in [1, args.concurrency] {
        let settings = RunSettings {
            concurrency,
            ..Default::default()
        };
        let (run, cases) = runner
            .create(stead_persistence::DEFAULT_PROJECT, "bench", &settings)
            .await?;
        eprintln!("running at concurrency {concurrency}…");
        let started = Instant::now();
        let results = runner
            .execute(
                &run,
                cases,
                &settings,
                stead_evals::run::EVAL_PRINCIPAL,
                |_, _| {},
            )
            .await?;
        times.push(started.elapsed());
        passed.push(results.iter().filter(|r| r.passed).count());
        // A case that fails here is a defect of the engine (the model double answers as it
        // did when recorded): show the first one.
        if let Some(failed) = results.iter().find(|r| !r.passed) {
            eprintln!("a case failed: {}", serde_json::to_string(failed)?);
        }
    }
    registry.passivate_all(Duration::from_secs(5)).await;
    Ok((times[0], times[1], passed[0].min(passed[1])))
}

async fn wait_idle(registry: &SessionRegistry, id: uuid::Uuid) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if registry.state(id).await?.turn.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    anyhow::bail!("a recorded turn did not end in 30 s")
}

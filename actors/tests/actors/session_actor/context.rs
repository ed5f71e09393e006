//! Context management through the session actor on both backends (docs/sessions.md, "Context
//! management"), with a model double that records every request: a session that outgrows its
//! budget journals `context_compacted` before the call that uses it, every prompt stays under
//! the budget, later prompts carry the summary, `stead replay check`'s decision check passes
//! without calling the summariser, and forks from before and after a compaction rebuild the
//! prompts the source had there. A turn too large alone fails with `context_overflow` and the
//! session answers the next message. A route whose provider counts more tokens than the
//! estimate is kept inside the budget by the counts it reports.

use std::sync::Mutex;

use stead_actors::context::{ContextRules, Strategy, SUMMARY_INSTRUCTION};
use stead_actors::session::{estimate, ModelRequest};
use stead_persistence::Backend;
use stead_testkit::db;

use super::*;

stead_testkit::both_backends!(
    a_long_session_is_compacted_before_the_calls_that_need_it,
    a_message_too_large_alone_fails_its_turn_and_the_session_goes_on,
    a_fact_in_the_memory_block_outlives_every_compaction,
    a_providers_reported_count_keeps_prompts_inside_the_budget,
);

const BUDGET: u64 = 300;

fn compacting_agent(strategy: Strategy) -> Agent {
    let mut agent = agent("http://127.0.0.1:9");
    agent.rules.context = ContextRules {
        max_prompt_tokens: Some(BUDGET),
        strategy,
        ..Default::default()
    };
    agent
}

/// A model double that records each request and answers summaries as `SUMMARY {n}`; it
/// reports `ratio` times the estimate as each call's prompt tokens.
fn recording_model(ratio: u64) -> (Arc<ScriptedModel>, Arc<Mutex<Vec<ModelRequest>>>) {
    let seen: Arc<Mutex<Vec<ModelRequest>>> = Arc::default();
    let log = seen.clone();
    let model = ScriptedModel::respond(move |request| {
        let mut log = log.lock().unwrap();
        log.push(request.clone());
        let summaries = log
            .iter()
            .filter(|r| r.system_prompt == SUMMARY_INSTRUCTION)
            .count();
        if request.system_prompt == SUMMARY_INSTRUCTION {
            (format!("SUMMARY {summaries}"), vec![])
        } else {
            (format!("Noted, answer {}.", log.len()), vec![])
        }
    })
    .with_prompt_tokens(move |request| ratio * estimate(request).tokens);
    (Arc::new(model), seen)
}

async fn a_long_session_is_compacted_before_the_calls_that_need_it(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.store.clone();
    let (model, seen) = recording_model(1);
    let agent = compacting_agent(Strategy::Summarize);
    let rules = agent.rules.clone();
    let registry = SessionRegistry::new(store.clone(), model.clone(), vec![agent]);
    let id = new_session(&store).await;
    let mut frames = registry.subscribe(id).await.unwrap();
    // 12 turns of ~60 tokens each: five times the budget.
    for n in 0..12 {
        say(
            &registry,
            id,
            &format!("Message {n}: {}", "lorem ipsum ".repeat(20)),
        )
        .await;
        wait_for(&mut frames, "turn_finished").await;
    }
    let journal = store.read(id, 0, 1000).await.unwrap();
    let kinds: Vec<&str> = journal.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "turn_finished").count(), 12);
    assert!(!kinds.contains(&"model_call_failed"), "{kinds:?}");
    let compactions: Vec<&stead_persistence::Event> = journal
        .iter()
        .filter(|e| e.kind == "context_compacted")
        .collect();
    assert!(compactions.len() >= 2, "{kinds:?}");
    for c in &compactions {
        // Journaled after its call started and before that call finished.
        let call = c.payload["call_id"].as_str().unwrap();
        let at = |kind: &str| {
            journal
                .iter()
                .find(|e| e.kind == kind && e.payload["call_id"] == call)
                .unwrap()
                .seq
        };
        assert!(at("model_call_started") < c.seq && c.seq < at("model_call_finished"));
        assert!(c.payload["summary"]
            .as_str()
            .unwrap()
            .starts_with("SUMMARY"));
        assert!(c.payload["tokens_after"].as_u64() < c.payload["tokens_before"].as_u64());
    }
    // Every agent call the double saw fits the budget; later ones carry the latest summary.
    let requests = seen.lock().unwrap().clone();
    let agent_calls: Vec<&ModelRequest> = requests
        .iter()
        .filter(|r| r.system_prompt != SUMMARY_INSTRUCTION)
        .collect();
    assert_eq!(agent_calls.len(), 12, "each turn's call was sent once");
    for request in &agent_calls {
        assert!(estimate(request).tokens <= BUDGET, "{request:?}");
    }
    assert!(agent_calls
        .last()
        .unwrap()
        .system_prompt
        .contains("Summary of the earlier conversation:\nSUMMARY"));
    let summaries = requests.len() - agent_calls.len();
    assert_eq!(summaries, compactions.len());

    // The decision check re-decides the whole journal; nothing is called.
    let calls = model.calls();
    let row = store.get_session(id).await.unwrap();
    let report = stead_actors::replay::check(id, &row.metadata, &journal, &rules).unwrap();
    assert_eq!(report.divergence, None);
    assert_eq!(model.calls(), calls, "the summariser is not called again");

    // Forks from before and from after the first compaction fold to the prompts the source
    // had at those points.
    let first = compactions[0].seq;
    for at in [first - 1, first] {
        let (fork, _) =
            stead_actors::replay::fork(store.as_ref(), &row, at, Default::default(), "local")
                .await
                .unwrap();
        let copied = store.read(fork.id, 0, 1000).await.unwrap();
        let forked = fold_all(&copied);
        let source = fold_all(&journal[..at as usize]);
        assert_eq!(forked.transcript, source.transcript, "at {at}");
        assert_eq!(forked.summary, source.summary, "at {at}");
    }
    registry.stop_all();
    db.finish().await;
}

async fn a_message_too_large_alone_fails_its_turn_and_the_session_goes_on(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.store.clone();
    let (model, _) = recording_model(1);
    let registry = SessionRegistry::new(
        store.clone(),
        model,
        vec![compacting_agent(Strategy::Truncate)],
    );
    let id = new_session(&store).await;
    let mut frames = registry.subscribe(id).await.unwrap();
    say(&registry, id, &"word ".repeat(400)).await;
    wait_for(&mut frames, "turn_finished").await;
    say(&registry, id, "A short one.").await;
    wait_for(&mut frames, "turn_finished").await;
    let journal = store.read(id, 0, 1000).await.unwrap();
    let failed = journal
        .iter()
        .find(|e| e.kind == "model_call_failed")
        .expect("the oversized turn failed");
    let error = failed.payload["error"].as_str().unwrap();
    assert!(error.starts_with("context_overflow:"), "{error}");
    assert!(error.contains(&format!("budget of {BUDGET}")), "{error}");
    let finished: Vec<&serde_json::Value> = journal
        .iter()
        .filter(|e| e.kind == "turn_finished")
        .map(|e| &e.payload["reason"])
        .collect();
    assert_eq!(finished, [&json!("model_failed"), &json!("completed")]);
    registry.stop_all();
    db.finish().await;
}

async fn a_fact_in_the_memory_block_outlives_every_compaction(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.store.clone();
    let mut agent = compacting_agent(Strategy::Truncate);
    agent.tools.insert(
        "memory".into(),
        Arc::new(stead_actors::memory_block::MemoryBlockTool::all_ops(
            ToolInfo {
                name: "memory".into(),
                description: "keep a fact".into(),
                approval: ApprovalPolicy::Never,
                idempotent: true,
            },
            200,
        )),
    );
    agent.rules.tools.insert(
        "memory".into(),
        ToolRules {
            approval: ApprovalPolicy::Never,
            idempotent: true,
            arguments: Default::default(),
            approver: Default::default(),
            builtin: Some(stead_actors::schedule_tool::Builtin::Memory {
                max_chars: 200,
                ops: vec!["append".into(), "replace".into(), "remove".into()],
            }),
        },
    );
    let rules = agent.rules.clone();
    // The first turn keeps the code word; every other answer is plain text. Each request's
    // system prompt is recorded.
    let prompts: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = prompts.clone();
    let model = Arc::new(ScriptedModel::respond(move |request| {
        let mut seen = seen.lock().unwrap();
        seen.push(request.system_prompt.clone());
        let first = seen.len() == 1;
        if first {
            (
                String::new(),
                vec![(
                    "memory".to_string(),
                    json!({"op": "append", "text": "Code word: HERON"}),
                )],
            )
        } else {
            ("Noted.".to_string(), vec![])
        }
    }));
    let registry = SessionRegistry::new(store.clone(), model, vec![agent]);
    let id = new_session(&store).await;
    let mut frames = registry.subscribe(id).await.unwrap();
    say(
        &registry,
        id,
        "Please keep the code word HERON in your memory.",
    )
    .await;
    wait_for(&mut frames, "turn_finished").await;
    for n in 0..10 {
        say(
            &registry,
            id,
            &format!("Message {n}: {}", "lorem ipsum ".repeat(20)),
        )
        .await;
        wait_for(&mut frames, "turn_finished").await;
    }
    let journal = store.read(id, 0, 1000).await.unwrap();
    assert!(journal.iter().any(|e| e.kind == "memory_updated"));
    let compactions = journal
        .iter()
        .filter(|e| e.kind == "context_compacted")
        .count();
    assert!(compactions >= 2, "{compactions}");
    // The last prompt, long after the first turn left the transcript, still holds the fact.
    let last = prompts.lock().unwrap().last().cloned().unwrap();
    assert!(
        last.contains("Memory (facts to keep):\nCode word: HERON"),
        "{last}"
    );
    let row = store.get_session(id).await.unwrap();
    let report = stead_actors::replay::check(id, &row.metadata, &journal, &rules).unwrap();
    assert_eq!(report.divergence, None);
    registry.stop_all();
    db.finish().await;
}

/// A provider whose tokenizer counts twice the estimate: the actor corrects each estimate by
/// the last call's reported count, so no prompt is over the budget by more than the error on
/// what one turn added (docs/sessions.md, "Token counting"); by the estimate alone they would
/// reach twice the budget.
async fn a_providers_reported_count_keeps_prompts_inside_the_budget(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.store.clone();
    let (model, seen) = recording_model(2);
    let registry = SessionRegistry::new(
        store.clone(),
        model,
        vec![compacting_agent(Strategy::Summarize)],
    );
    let id = new_session(&store).await;
    let mut frames = registry.subscribe(id).await.unwrap();
    let message = |n: usize| format!("Message {n}: {}", "lorem ipsum ".repeat(20));
    for n in 0..12 {
        say(&registry, id, &message(n)).await;
        wait_for(&mut frames, "turn_finished").await;
    }
    let journal = store.read(id, 0, 1000).await.unwrap();
    let count = |kind: &str| journal.iter().filter(|e| e.kind == kind).count();
    assert_eq!(count("turn_finished"), 12);
    assert_eq!(count("model_call_failed"), 0);
    assert!(
        count("context_compacted") >= 3,
        "{}",
        count("context_compacted")
    );
    // What one turn adds: its message and the reply before it, as estimated.
    let added = stead_actors::context::estimate(message(10).len() + "Noted, answer 99.".len());
    let requests = seen.lock().unwrap().clone();
    for request in requests
        .iter()
        .filter(|r| r.system_prompt != SUMMARY_INSTRUCTION)
    {
        let counted = 2 * estimate(request).tokens;
        assert!(
            counted <= BUDGET + added,
            "{counted} tokens as the provider counts them, over the budget {BUDGET} by more \
             than one turn's estimate ({added})"
        );
    }
    registry.stop_all();
    db.finish().await;
}

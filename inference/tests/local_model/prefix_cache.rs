//! The prefix cache with the real model: a prompt continued from cached KV computes what its
//! full prefill does, for solo runs exactly, under continuous batching from the first token,
//! and within a tiny budget.

use std::sync::Arc;

use stead_inference::engine::{Engine, KvRows};
use stead_inference::model_dir::ModelDir;
use stead_inference::prefix_cache::{KvShape, PrefixCache};
use stead_inference::{Completion, Role, ToolCall};

use super::*;

const SYSTEM: &str = "You are Stead's demo assistant. You keep short notes for the user, \
    answer questions about them briefly and politely, and call a tool only when the user asks \
    for something a tool does. Never invent notes that were not saved.";

/// The cache's own behaviour: without the small-model adapters, whose digest of earlier turns
/// changes the system message every turn (docs/inference.md, "Conversations") — with it a
/// later turn reuses only the agent's own system prompt, by design.
fn pool_config(prefix_cache_bytes: usize) -> PoolConfig {
    let mut config = config();
    config.prefix_cache_bytes = prefix_cache_bytes;
    config.prefix_cache_min_tokens = 8;
    config.adapters = stead_inference::adapt::Adapters {
        tool_result_hint: false,
        digest_history: false,
        small_talk: false,
    };
    config
}

fn request(messages: Vec<ChatMessage>, max_tokens: usize) -> ChatRequest {
    ChatRequest {
        model: MODEL.into(),
        messages,
        sampling: SamplingParams {
            max_tokens,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn assistant(text: &str) -> ChatMessage {
    ChatMessage::new(Role::Assistant, text)
}

fn model_dir() -> ModelDir {
    ModelDir::open(&data_dir().join("models").join(MODEL)).unwrap()
}

/// What one cached token costs for this model.
fn token_bytes() -> usize {
    let c = model_dir().config;
    let shape = KvShape {
        layers: c.num_layers,
        heads: c.num_kv_heads,
        head_dim: c.head_dim,
    };
    PrefixCache::new(0, 1, shape, Arc::default()).token_bytes()
}

/// A three-step conversation: a question, a follow-up after the answer, then a tool call and
/// its result (each step's prompt extends the previous one's).
async fn conversation(pool: &InferencePool, tools: &[ToolSpec], forced: bool) -> Vec<Completion> {
    let mut messages = vec![
        ChatMessage::system(SYSTEM),
        ChatMessage::user("What is the capital of France?"),
    ];
    let mut answers = Vec::new();
    for step in 0..3 {
        let mut req = request(messages.clone(), 24);
        req.tools = tools.to_vec();
        if forced && step == 2 {
            req.tool_choice = ToolChoice::Function("get_weather".into());
        }
        let answer = pool.complete(req).await.unwrap();
        messages.push(assistant(&answer.text));
        if step == 0 {
            messages.push(ChatMessage::user("And what is it famous for?"));
        } else {
            let call = ToolCall {
                id: format!("call_{step}"),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris","unit":"celsius"}"#.into(),
            };
            messages.last_mut().unwrap().tool_calls = vec![call];
            let mut result = ChatMessage::new(Role::Tool, r#"{"temperature":18,"sky":"clear"}"#);
            result.tool_call_id = Some(format!("call_{step}"));
            messages.push(result);
            messages.push(ChatMessage::user("So should I take an umbrella?"));
        }
        answers.push(answer);
    }
    answers
}

fn assert_same_answers(cached: &[Completion], reference: &[Completion]) {
    assert_eq!(cached.len(), reference.len());
    for (step, (a, b)) in cached.iter().zip(reference).enumerate() {
        assert_eq!(a.text, b.text, "answer {step}");
        assert_eq!(a.tool_calls.len(), b.tool_calls.len(), "answer {step}");
        for (x, y) in a.tool_calls.iter().zip(&b.tool_calls) {
            assert_eq!(
                (&x.name, &x.arguments),
                (&y.name, &y.arguments),
                "answer {step}"
            );
        }
        assert_eq!(a.usage, b.usage, "answer {step}");
        assert_eq!(a.finish_reason, b.finish_reason, "answer {step}");
    }
}

/// Solo greedy runs: every step's answer with the cache equals the one without it, and the
/// later steps prefill only what follows the previous step's prompt (two tokens at least).
/// Plain text, a forced tool call, and a continuation in chunks of 8.
#[test]
fn a_cached_prefix_gives_the_answer_of_a_full_prefill() {
    runtime().block_on(async {
        for (tools, forced, chunk) in [
            (Vec::new(), false, None),
            (tools(), true, None),
            (Vec::new(), false, Some(8)),
        ] {
            let mut off = pool_config(0);
            let mut on = pool_config(64 << 20);
            if let Some(chunk) = chunk {
                off.prefill_chunk = chunk;
                on.prefill_chunk = chunk;
            }
            let off = InferencePool::start(off).await.unwrap();
            let reference = conversation(&off, &tools, forced).await;
            off.shutdown().await;
            assert!(reference.iter().all(|c| c.cached_prompt_tokens == 0));

            let on = InferencePool::start(on).await.unwrap();
            let cached = conversation(&on, &tools, forced).await;
            let stats = on.prefix_stats();
            on.shutdown().await;
            assert_same_answers(&cached, &reference);
            assert_eq!(cached[0].cached_prompt_tokens, 0);
            for step in 1..3 {
                let previous = cached[step - 1].usage.prompt_tokens;
                let got = cached[step].cached_prompt_tokens;
                assert!(
                    got + 2 >= previous && got + 2 <= cached[step].usage.prompt_tokens,
                    "step {step}: {got} cached of {} (previous prompt {previous})",
                    cached[step].usage.prompt_tokens
                );
            }
            assert_eq!((stats.hits, stats.misses), (2, 1), "{stats:?}");
            assert!(stats.bytes > 0 && stats.bytes <= stats.capacity);
        }
    });
}

/// The engine itself: the logits of a prompt continued from a cached prefix, for several
/// prefix lengths, against its full prefill (same argmax; the difference is printed and
/// bounded).
#[test]
fn a_continued_prefill_has_the_logits_of_a_full_one() {
    let config = config();
    let env = stead_inference::engine::init_runtime(&config.runtime_library).unwrap();
    let model = model_dir();
    let mut engine = Engine::load(&env, &model, 2, config.execution_provider).unwrap();
    let tokenizer = tokenizers::Tokenizer::from_file(model.tokenizer_path()).unwrap();
    let text = format!(
        "{SYSTEM} The user asked about Paris, then about its museums, and then asked for the \
         weather tomorrow morning."
    );
    let prompt: Vec<u32> = tokenizer
        .encode(text.as_str(), false)
        .unwrap()
        .get_ids()
        .to_vec();
    assert!(prompt.len() > 60, "{}", prompt.len());
    let (full, _) = engine.prefill(&[&prompt]).unwrap();
    let argmax = |l: &[f32]| {
        l.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap()
            .0
    };
    for stored in [prompt.len() - 2, prompt.len() / 2, 20] {
        let mut cache = PrefixCache::new(256 << 20, 1, engine.kv_shape(), Arc::default());
        let (_, kv) = engine.prefill(&[&prompt[..stored]]).unwrap();
        cache.insert(&prompt[..stored], &KvRows::new(&engine, &kv, 0).unwrap());
        let hit = cache.lookup(&prompt, prompt.len() - 2).unwrap();
        assert_eq!(hit.len, stored);
        let past = engine.past_from(hit).unwrap();
        let (continued, _) = engine
            .prefill_continue(past, stored, &prompt[stored..])
            .unwrap();
        let diff = full[0]
            .iter()
            .zip(&continued[0])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        eprintln!(
            "prefix {stored} of {}: max |Δlogit| = {diff:e}",
            prompt.len()
        );
        assert_eq!(argmax(&full[0]), argmax(&continued[0]));
        assert!(diff <= 1e-4, "prefix {stored}: max |Δlogit| = {diff}");
    }
}

/// The graph's last-position-only logits (what every prompt pass asks for) are the last row
/// of its every-position logits, for right-padded rows of a batch and for a continued prefill.
#[test]
fn last_position_logits_are_those_of_the_full_pass() {
    let config = config();
    let env = stead_inference::engine::init_runtime(&config.runtime_library).unwrap();
    let model = model_dir();
    let mut engine = Engine::load(&env, &model, 2, config.execution_provider).unwrap();
    assert!(
        engine.last_logits_only(),
        "the prepared model lacks last_logits_only"
    );
    let tokenizer = tokenizers::Tokenizer::from_file(model.tokenizer_path()).unwrap();
    let ids =
        |text: &str| -> Vec<u32> { tokenizer.encode(text, false).unwrap().get_ids().to_vec() };
    let long = ids(&format!("{SYSTEM} What is the capital of France?"));
    let short = ids("Name three colours.");
    let mut passes = Vec::new();
    for on in [true, false] {
        engine.set_last_logits_only(on);
        let (batch, _) = engine.prefill(&[&long, &short]).unwrap();
        let (_, kv) = engine.prefill(&[&long[..20]]).unwrap();
        let (continued, _) = engine.prefill_continue(kv, 20, &long[20..]).unwrap();
        passes.push([batch[0].clone(), batch[1].clone(), continued[0].clone()]);
    }
    for (what, (trimmed, full)) in ["long row", "short row", "continued"]
        .iter()
        .zip(passes[0].iter().zip(&passes[1]))
    {
        assert_eq!(trimmed.len(), full.len());
        let diff = trimmed
            .iter()
            .zip(full)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        eprintln!("{what}: max |Δlogit| = {diff:e}");
        assert!(diff <= 1e-3, "{what}: max |Δlogit| = {diff}");
    }
}

/// Continuous batching: a request continuing a cached prefix joins two rows that are decoding;
/// its first token is the solo uncached run's (later tokens decode in a batch, which is not
/// batch-invariant on this CPU).
#[test]
fn a_row_resuming_from_a_cached_prefix_joins_a_decoding_batch() {
    runtime().block_on(async {
        let first = request(
            vec![
                ChatMessage::system(SYSTEM),
                ChatMessage::user("Name a colour."),
            ],
            8,
        );
        let mut second = first.messages.clone();
        second.push(assistant("Blue."));
        second.push(ChatMessage::user("Now name a fruit."));

        let off = InferencePool::start(pool_config(0)).await.unwrap();
        let solo = off.complete(request(second.clone(), 1)).await.unwrap();
        off.shutdown().await;

        let on = InferencePool::start(pool_config(64 << 20)).await.unwrap();
        on.complete(first).await.unwrap();
        let mut long = ask("Count slowly from one to one hundred.", 200);
        long.sampling.ignore_eos = true;
        let a = on.generate(long.clone()).await.unwrap();
        let b = on.generate(long).await.unwrap();
        while a.tokens_generated() < 3 || b.tokens_generated() < 3 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let joined = on.complete(request(second, 6)).await.unwrap();
        let stats = on.stats().await;
        drop((a, b));
        on.shutdown().await;
        assert!(joined.cached_prompt_tokens > 0);
        assert!(stats.peak_batch >= 3, "{stats:?}");
        assert!(!solo.text.is_empty());
        assert!(
            joined.text.starts_with(&solo.text),
            "joined {:?}, solo first token {:?}",
            joined.text,
            solo.text
        );
    });
}

/// A budget of 120 tokens' KV and six interleaved conversations: prompts are evicted, every
/// answer equals the uncached one, and the cache never holds more than its budget.
#[test]
fn eviction_under_a_tiny_budget_keeps_answers_exact() {
    let topics = ["rivers", "birds", "bread", "trains", "tea", "stars"];
    let steps = |topic: &str, step: usize| {
        let mut messages = vec![
            ChatMessage::system(format!(
                "You answer questions about {topic} in one sentence."
            )),
            ChatMessage::user(format!("Tell me one fact about {topic}.")),
        ];
        if step == 1 {
            messages.push(assistant("Here is one."));
            messages.push(ChatMessage::user("Tell me another one, please."));
        }
        messages
    };
    let run = |config: PoolConfig| async move {
        let pool = InferencePool::start(config).await.unwrap();
        let mut answers = Vec::new();
        let mut within = true;
        // The second steps newest first, so the latest prompts are still cached.
        for step in 0..2 {
            let order: Vec<&str> = if step == 0 {
                topics.to_vec()
            } else {
                topics.iter().rev().copied().collect()
            };
            for topic in order {
                let answer = pool.complete(request(steps(topic, step), 12)).await;
                answers.push(answer.unwrap());
                let s = pool.prefix_stats();
                within &= s.bytes <= s.capacity;
            }
        }
        let stats = pool.prefix_stats();
        pool.shutdown().await;
        (answers, stats, within)
    };
    runtime().block_on(async {
        let (reference, _, _) = run(pool_config(0)).await;
        let budget = 120 * token_bytes();
        let (cached, stats, within) = run(pool_config(budget)).await;
        assert_same_answers(&cached, &reference);
        assert!(within, "the cache went over its budget");
        assert!(stats.evictions > 0, "{stats:?}");
        assert!(stats.hits > 0, "{stats:?}");
        assert!(stats.bytes <= budget);
    });
}

/// Four cold requests with one system prompt, admitted together: the shared prefix is stored
/// once.
#[test]
fn concurrent_cold_requests_store_their_shared_prefix_once() {
    runtime().block_on(async {
        let pool = InferencePool::start(pool_config(64 << 20)).await.unwrap();
        let mut started = Vec::new();
        for q in [
            "Name a river.",
            "Name a bird.",
            "Name a bread.",
            "Name a train.",
        ] {
            let req = request(vec![ChatMessage::system(SYSTEM), ChatMessage::user(q)], 8);
            started.push(pool.generate(req).await.unwrap());
        }
        let mut done = Vec::new();
        for generation in started {
            done.push(generation.collect().await.unwrap());
        }
        let stats = pool.prefix_stats();
        pool.shutdown().await;
        let prompt_tokens: usize = done.iter().map(|c| c.usage.prompt_tokens).sum();
        assert!(done.iter().all(|c| !c.text.is_empty()));
        assert!(
            stats.bytes < prompt_tokens * token_bytes() * 2 / 3,
            "{} bytes for {prompt_tokens} prompt tokens",
            stats.bytes
        );
    });
}

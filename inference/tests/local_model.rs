//! The engine with the real model (SmolLM2-135M-Instruct, prepared by `stead setup` into
//! `$STEAD_DATA_DIR`; scripts/test.sh does that first).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::{json, Value};
use stead_inference::engine::ExecutionProvider;
use stead_inference::pool::{InferencePool, PoolConfig};
use stead_inference::text::IncrementalDecoder;
use stead_inference::{
    ChatMessage, ChatRequest, Error, FinishReason, SamplingParams, StreamEvent, ToolChoice,
    ToolSpec,
};

#[path = "local_model/embedding.rs"]
mod embedding;
#[path = "local_model/prefix_cache.rs"]
mod prefix_cache;

const MODEL: &str = "smollm2-135m-instruct";

fn data_dir() -> PathBuf {
    match std::env::var_os("STEAD_DATA_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => panic!(
            "model tests need STEAD_DATA_DIR pointing at a data dir prepared by `stead setup`; scripts/test.sh does this"
        ),
    }
}

/// The CPU runtime from `stead setup` by default; scripts/gpu-check.sh points
/// `INFERENCE_TEST_RUNTIME` at the onnxruntime-gpu library and sets
/// `INFERENCE_TEST_PROVIDER=cuda` to run these same tests on CUDA.
fn config() -> PoolConfig {
    let data = data_dir();
    let runtime = std::env::var_os("INFERENCE_TEST_RUNTIME")
        .map(PathBuf::from)
        .unwrap_or_else(|| data.join("runtime").join("libonnxruntime.so"));
    let mut config = PoolConfig::new(MODEL, data.join("models").join(MODEL), runtime);
    config.execution_provider = match std::env::var("INFERENCE_TEST_PROVIDER").as_deref() {
        Ok("cuda") => ExecutionProvider::Cuda,
        Ok("auto") => ExecutionProvider::Auto,
        _ => ExecutionProvider::Cpu,
    };
    config
}

/// One runtime and one pool for the tests that can share them: loading the model per test
/// would multiply memory and oversubscribe the cores.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn pool() -> &'static InferencePool {
    static POOL: OnceLock<InferencePool> = OnceLock::new();
    POOL.get_or_init(|| {
        runtime()
            .block_on(InferencePool::start(config()))
            .expect("start pool")
    })
}

fn ask(text: &str, max_tokens: usize) -> ChatRequest {
    ChatRequest {
        model: MODEL.into(),
        messages: vec![ChatMessage::user(text)],
        sampling: SamplingParams {
            max_tokens,
            ..Default::default()
        },
        assistant_prefix: String::new(),
        ..Default::default()
    }
}

#[test]
fn greedy_answer_knows_the_capital_of_france() {
    let pool = pool();
    runtime().block_on(async {
        let completion = pool
            .complete(ask("What is the capital of France?", 48))
            .await
            .unwrap();
        assert!(
            completion.text.contains("Paris"),
            "answer: {}",
            completion.text
        );
        assert!(completion.usage.prompt_tokens > 5);
        assert!(completion.usage.completion_tokens > 0);
        assert!(completion.timings.ttft_ms > 0.0);
        assert!(matches!(
            completion.finish_reason,
            FinishReason::Stop | FinishReason::Length
        ));
    });
}

#[test]
fn a_prompt_prefilled_in_chunks_gives_the_same_answer() {
    runtime().block_on(async {
        // The reference runs on a pool of its own too: on the shared pool other tests' rows
        // would join its batch, and decoding is not batch-invariant (see the next test).
        let pool = InferencePool::start(config()).await.unwrap();
        let reference = pool
            .complete(ask("What is the capital of France?", 24))
            .await
            .unwrap();
        pool.shutdown().await;
        // 37 prompt tokens in pieces of 8: five passes, each continuing the cache.
        let mut config = config();
        config.prefill_chunk = 8;
        let pool = InferencePool::start(config).await.unwrap();
        let chunked = pool
            .complete(ask("What is the capital of France?", 24))
            .await
            .unwrap();
        assert_eq!(chunked.text, reference.text);
        assert_eq!(chunked.usage, reference.usage);
        pool.shutdown().await;
    });
}

#[test]
fn streamed_deltas_concatenate_to_the_final_text() {
    let pool = pool();
    runtime().block_on(async {
        let mut generation = pool
            .generate(ask("Write three sentences about the sea.", 64))
            .await
            .unwrap();
        let mut streamed = String::new();
        let mut deltas = 0;
        let completion = loop {
            match generation.next().await.expect("stream ends with Done") {
                StreamEvent::Delta(text) => {
                    assert!(!text.is_empty());
                    streamed.push_str(&text);
                    deltas += 1;
                }
                StreamEvent::Done(completion) => break completion,
                StreamEvent::Failed(error) => panic!("{error}"),
            }
        };
        assert!(deltas > 5, "text arrives in pieces");
        assert_eq!(streamed, completion.text);
        assert_eq!(
            completion.timings.inter_token_ms > 0.0,
            completion.usage.completion_tokens > 1
        );
    });
}

#[test]
fn each_batched_row_starts_as_its_solo_run() {
    let pool = pool();
    runtime().block_on(async {
        let prompts = [
            "What is the capital of France?",
            "Name a fruit that is yellow.",
            "Say hello in Spanish.",
            "What is two plus two?",
        ];
        let mut alone = Vec::new();
        for p in prompts {
            alone.push(pool.complete(ask(p, 24)).await.unwrap().text);
        }
        // Started together they decode as one batch of rows with different lengths (right
        // padded, told apart by the attention mask). Each row's first token comes from its
        // prefill, which runs as a matrix product alone or batched, so it must be the solo
        // run's: a row whose padding, mask or cache slot the batch mixed up fails here. Later
        // tokens are not batch-invariant: ONNX Runtime's int4 MatMul runs another kernel for
        // one row than for several, and on a 2-vCPU AMD EPYC VM a near-tie fell the other way
        // as early as the second word ("Hola, amigo!" batched, "Hola, Para …" alone).
        let together = futures_join(prompts.iter().map(|p| pool.complete(ask(p, 24)))).await;
        for ((p, a), t) in prompts.iter().zip(&alone).zip(together) {
            let t = t.unwrap().text;
            let first = |text: &str| text.split_whitespace().next().unwrap_or("").to_string();
            assert!(!t.trim().is_empty(), "prompt {p:?}: empty text");
            assert_eq!(first(&t), first(a), "prompt {p:?}: {t:?} vs {a:?}");
        }
        assert!(
            pool.stats().await.peak_batch >= 2,
            "the rows were decoded as a batch"
        );
    });
}

/// Runs futures as concurrent tasks and returns their outputs in order.
async fn futures_join<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut out = Vec::new();
    let handles: Vec<_> = futures.map(|f| tokio::spawn(f)).collect();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Current weather in a city".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "city": { "type": "string", "maxLength": 40 },
                    "unit": { "type": "string", "enum": ["celsius", "fahrenheit"] }
                },
                "required": ["city", "unit"]
            }),
        },
        ToolSpec {
            name: "delete_records".into(),
            description: "Delete records from a table".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "table": { "type": "string", "maxLength": 30 },
                    "older_than_days": { "type": "integer", "minimum": 0, "maximum": 3650 }
                },
                "required": ["table", "older_than_days"]
            }),
        },
        ToolSpec {
            name: "send_email".into(),
            description: "Send an email".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "to": { "type": "string", "maxLength": 40 },
                    "urgent": { "type": "boolean" },
                    "tags": { "type": "array", "items": { "type": "string", "maxLength": 12 }, "maxItems": 3 }
                },
                "required": ["to", "urgent"]
            }),
        },
    ]
}

/// Checks the parts of JSON Schema the test tools use.
fn conforms(value: &Value, schema: &Value) -> Result<(), String> {
    match schema["type"].as_str() {
        Some("object") => {
            let map = value.as_object().ok_or("not an object")?;
            let properties = schema["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            for key in map.keys() {
                if !properties.contains_key(key) {
                    return Err(format!("unexpected key {key}"));
                }
            }
            for required in schema["required"].as_array().into_iter().flatten() {
                if !map.contains_key(required.as_str().unwrap()) {
                    return Err(format!("missing {required}"));
                }
            }
            for (key, v) in map {
                conforms(v, &properties[key]).map_err(|e| format!("{key}: {e}"))?;
            }
        }
        Some("string") => {
            let s = value.as_str().ok_or("not a string")?;
            if let Some(options) = schema["enum"].as_array() {
                if !options.contains(value) {
                    return Err(format!("{s} not in enum"));
                }
            }
            if let Some(max) = schema["maxLength"].as_u64() {
                if s.chars().count() as u64 > max {
                    return Err("too long".into());
                }
            }
        }
        Some("integer") => {
            let n = value.as_i64().ok_or("not an integer")?;
            if schema["minimum"].as_i64().is_some_and(|m| n < m)
                || schema["maximum"].as_i64().is_some_and(|m| n > m)
            {
                return Err("out of range".into());
            }
        }
        Some("boolean") => {
            value.as_bool().ok_or("not a boolean")?;
        }
        Some("array") => {
            let items = value.as_array().ok_or("not an array")?;
            if schema["maxItems"]
                .as_u64()
                .is_some_and(|m| items.len() as u64 > m)
            {
                return Err("too many items".into());
            }
            for item in items {
                conforms(item, &schema["items"])?;
            }
        }
        other => return Err(format!("schema type {other:?} not handled")),
    }
    Ok(())
}

#[test]
fn forced_tool_calls_always_parse_and_validate() {
    let pool = pool();
    runtime().block_on(async {
        let prompts = [
            "What's the weather in Paris?",
            "Is it cold in Oslo right now?",
            "Delete old rows from the users table.",
            "Clean up the logs table, keep 30 days.",
            "Email bob@example.com that the build broke.",
            "Tell alice@example.com the release is out, it's urgent.",
            "Weather for Tokyo in fahrenheit please.",
            "Remove sessions older than a week.",
            "How warm is it in Cairo?",
            "Send an email to ops@example.com about the outage.",
        ];
        let tools = tools();
        let mut calls = 0;
        for (i, prompt) in prompts.iter().enumerate() {
            for choice in [
                ToolChoice::Required,
                ToolChoice::Function(tools[i % 3].name.clone()),
            ] {
                let request = ChatRequest {
                    model: MODEL.into(),
                    messages: vec![ChatMessage::user(*prompt)],
                    tools: tools.clone(),
                    tool_choice: choice.clone(),
                    sampling: SamplingParams {
                        max_tokens: 120,
                        ..Default::default()
                    },
                    assistant_prefix: String::new(),
                };
                let completion = pool.complete(request).await.unwrap();
                assert_eq!(
                    completion.finish_reason,
                    FinishReason::ToolCalls,
                    "{prompt}: {completion:?}"
                );
                assert_eq!(completion.tool_calls.len(), 1);
                let call = &completion.tool_calls[0];
                if let ToolChoice::Function(name) = &choice {
                    assert_eq!(&call.name, name);
                }
                let tool = tools
                    .iter()
                    .find(|t| t.name == call.name)
                    .expect("a known tool");
                let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|e| {
                    panic!("{prompt}: arguments do not parse: {e}: {}", call.arguments)
                });
                conforms(&arguments, &tool.parameters)
                    .unwrap_or_else(|e| panic!("{prompt}: {e}: {arguments}"));
                assert!(call.id.starts_with("call_"));
                calls += 1;
            }
        }
        assert_eq!(calls, 20);
    });
}

#[test]
fn cancelling_stops_decoding_within_one_step() {
    let pool = pool();
    runtime().block_on(async {
        for trial in 0..5 {
            let mut generation = pool
                .generate(ask("Count from one to two hundred in words.", 300))
                .await
                .unwrap();
            let mut deltas = 0;
            while deltas < 3 + trial {
                if let Some(StreamEvent::Delta(_)) = generation.next().await {
                    deltas += 1;
                }
            }
            generation.cancel();
            // Read after setting the flag: at least what the engine had made when it was set.
            let at_cancel = generation.tokens_generated();
            let completion = generation.collect().await.unwrap();
            assert_eq!(completion.finish_reason, FinishReason::Cancelled);
            assert!(
                completion.usage.completion_tokens <= at_cancel + 1,
                "{} tokens after cancelling at {at_cancel}",
                completion.usage.completion_tokens
            );
        }
    });
}

#[test]
fn dropping_a_stream_cancels_it() {
    runtime().block_on(async {
        // A pool of its own: the shared one is busy with other tests.
        let pool = InferencePool::start(config()).await.unwrap();
        let mut generation = pool
            .generate(ask("Tell me a long story.", 300))
            .await
            .unwrap();
        assert!(matches!(
            generation.next().await,
            Some(StreamEvent::Delta(_))
        ));
        drop(generation);
        let mut idle = false;
        for _ in 0..500 {
            if pool.stats().await.active == 0 {
                idle = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(idle, "a dropped generation kept decoding");
        pool.shutdown().await;
    });
}

#[test]
fn a_full_queue_answers_overloaded_at_once() {
    runtime().block_on(async {
        let mut config = config();
        config.max_batch = 1;
        config.queue_capacity = 1;
        let pool = InferencePool::start(config).await.unwrap();
        // One job decoding, one waiting: the next is refused.
        let mut running = pool
            .generate(ask("Tell me a long story.", 200))
            .await
            .unwrap();
        assert!(matches!(running.next().await, Some(StreamEvent::Delta(_))));
        let _waiting = pool.generate(ask("Hi", 4)).await.unwrap();
        match pool.generate(ask("Hi", 4)).await {
            Err(Error::Overloaded { queued }) => assert_eq!(queued, 1),
            Ok(_) => panic!("a full queue must refuse"),
            Err(other) => panic!("expected Overloaded, got {other}"),
        }
        let stats = pool.stats().await;
        assert_eq!((stats.queued, stats.refused), (1, 1));
        drop(running);
        pool.shutdown().await;
    });
}

#[test]
fn bad_requests_get_typed_errors() {
    let pool = pool();
    runtime().block_on(async {
        let mut empty = ask("x", 8);
        empty.messages.clear();
        assert!(matches!(pool.generate(empty).await, Err(Error::InvalidRequest(_))));

        let mut unknown = ask("x", 8);
        unknown.model = "gpt-17".into();
        assert!(matches!(pool.generate(unknown).await, Err(Error::UnknownModel(m)) if m == "gpt-17"));

        let mut bad_schema = ask("x", 8);
        bad_schema.tools = vec![ToolSpec {
            name: "broken".into(),
            description: String::new(),
            parameters: json!({ "type": "object", "properties": { "a": { "type": "no-such-type" } } }),
        }];
        assert!(matches!(
            pool.generate(bad_schema).await,
            Err(Error::InvalidToolSchema { tool, .. }) if tool == "broken"
        ));

        let huge = ask("x", 1_000_000);
        assert!(matches!(pool.generate(huge).await, Err(Error::ContextOverflow { .. })));

        let mut bad_sampling = ask("x", 8);
        bad_sampling.sampling.top_p = 0.0;
        assert!(matches!(pool.generate(bad_sampling).await, Err(Error::InvalidRequest(_))));

        let mut missing_tool = ask("x", 8);
        missing_tool.tool_choice = ToolChoice::Function("nope".into());
        assert!(matches!(pool.generate(missing_tool).await, Err(Error::InvalidRequest(_))));

        // The pool still serves after refusals.
        assert!(pool.complete(ask("Hi", 4)).await.is_ok());
    });
}

#[test]
fn incremental_decoding_matches_whole_decoding() {
    let tokenizer = tokenizers::Tokenizer::from_file(
        data_dir().join("models").join(MODEL).join("tokenizer.json"),
    )
    .unwrap();
    for text in [
        "Hello, world!",
        "naïve café — 日本語 🦀 ok",
        "  leading spaces\nand 123456 digits",
    ] {
        let ids = tokenizer.encode(text, false).unwrap().get_ids().to_vec();
        let mut decoder = IncrementalDecoder::new();
        let mut out = String::new();
        for id in &ids {
            let piece = decoder.push(&tokenizer, *id);
            assert!(
                !piece.contains('\u{FFFD}'),
                "a delta split a character: {piece:?}"
            );
            out.push_str(&piece);
        }
        out.push_str(&decoder.finish(&tokenizer));
        assert_eq!(out, tokenizer.decode(&ids, true).unwrap());
        assert_eq!(out, text);
    }
}

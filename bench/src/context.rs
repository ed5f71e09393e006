//! `stead bench context` (docs/sessions.md, "Context management"): one session of
//! many turns on a route whose budget is small, through a `stead serve` child whose model is an
//! upstream double inside the bench process (a test double: it runs no model). Turn 1 asks the
//! agent to keep a code word, and the double answers with a `memory_block` call; every later
//! turn sends a ~300-token report, the double calls the `lookup` webhook tool (also served by
//! the double) whose ~1,000-token result joins the transcript, then answers; the last turn asks
//! for the code word, and the double answers it only when its prompt still holds the memory
//! block. The double measures every prompt as the agent's estimate does (characters of the
//! messages, calls and tool definitions, four to a token) and refuses one over the budget.
//! Printed: turns, failures, the largest prompt against the budget, compactions and their
//! share of model calls, whether the fact was recalled, turn times.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::cli::ContextBenchArgs;
use crate::ServeProcess;

/// What the double saw.
#[derive(Default)]
struct Seen {
    prompts: AtomicUsize,
    summaries: AtomicUsize,
    over_budget: AtomicUsize,
    largest: AtomicU64,
    budget: u64,
}

/// A prompt's tokens as the agent estimates them: message texts, calls and tool definitions.
fn prompt_tokens(body: &Value) -> u64 {
    let messages: usize = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            m["content"].as_str().map_or(0, str::len)
                + m["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        c["function"]["name"].as_str().map_or(0, str::len)
                            + c["function"]["arguments"].as_str().map_or(0, str::len)
                    })
                    .sum::<usize>()
        })
        .sum();
    let tools: usize = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let f = &t["function"];
            f["name"].as_str().map_or(0, str::len)
                + f["description"].as_str().map_or(0, str::len)
                + f["parameters"].to_string().len()
        })
        .sum();
    stead_actors::context::estimate(messages + tools)
}

/// The double's answer to one request: text, or one tool call.
fn answer(body: &Value) -> Result<String, (String, Value)> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let system = messages
        .first()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    if system.starts_with("You summarise conversations.") {
        return Ok("Summary: the user sent numbered reports, each looked up and filed.".into());
    }
    let last = messages.last().cloned().unwrap_or_default();
    let text = last["content"].as_str().unwrap_or_default();
    if last["role"] == "tool" {
        return Ok(if text.contains("\"memory\"") {
            "Noted: I keep the code word in my memory.".into()
        } else {
            "Done: the record is filed.".into()
        });
    }
    if text.starts_with("Remember") {
        return Err((
            "memory".into(),
            json!({"op": "append", "text": "Code word: HERON"}),
        ));
    }
    if text.starts_with("What is the code word") {
        return Ok(if system.contains("Code word: HERON") {
            "The code word is HERON.".into()
        } else {
            "I do not know the code word.".into()
        });
    }
    Err(("lookup".into(), json!({"report": text.len()})))
}

/// `POST /v1/chat/completions`, streamed the way OpenAI streams (or whole).
async fn chat(State(seen): State<Arc<Seen>>, body: axum::body::Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    let tokens = prompt_tokens(&body);
    seen.prompts.fetch_add(1, Ordering::SeqCst);
    seen.largest.fetch_max(tokens, Ordering::SeqCst);
    if tokens > seen.budget {
        seen.over_budget.fetch_add(1, Ordering::SeqCst);
        let error = json!({"error": {"message": format!("{tokens} tokens: over the context")}});
        return (axum::http::StatusCode::BAD_REQUEST, axum::Json(error)).into_response();
    }
    let reply = answer(&body);
    if matches!(&reply, Ok(t) if t.starts_with("Summary:")) {
        seen.summaries.fetch_add(1, Ordering::SeqCst);
    }
    let (delta, message, finish) = match reply {
        Ok(text) => (
            json!({"role": "assistant", "content": text}),
            json!({"role": "assistant", "content": text}),
            "stop",
        ),
        Err((name, arguments)) => {
            let call = json!([{ "index": 0, "id": "call_1", "type": "function",
                "function": { "name": name, "arguments": arguments.to_string() } }]);
            (
                json!({"role": "assistant", "tool_calls": call}),
                json!({"role": "assistant", "content": null, "tool_calls": call}),
                "tool_calls",
            )
        }
    };
    let usage =
        json!({"prompt_tokens": tokens, "completion_tokens": 8, "total_tokens": tokens + 8});
    if body["stream"] != true {
        return axum::Json(json!({
            "id": "chatcmpl-bench", "object": "chat.completion", "model": "double",
            "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
            "usage": usage,
        }))
        .into_response();
    }
    let chunk = |delta: Value, finish: Option<&str>| {
        format!(
            "data: {}\n\n",
            json!({ "id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": "double",
                    "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] })
        )
    };
    let mut text = chunk(delta, None);
    text.push_str(&chunk(json!({}), Some(finish)));
    if body["stream_options"]["include_usage"] == true {
        text.push_str(&format!(
            "data: {}\n\n",
            json!({"choices": [], "usage": usage})
        ));
    }
    text.push_str("data: [DONE]\n\n");
    (
        [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
        text,
    )
        .into_response()
}

/// `POST /lookup`: the webhook tool's ~1,000-token record.
async fn lookup() -> axum::Json<Value> {
    axum::Json(json!({ "record": "ledger entry 42 filed and cross-checked; ".repeat(95) }))
}

pub async fn context(args: ContextBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.turns >= 2, "--turns must be at least 2");
    let seen = Arc::new(Seen {
        budget: args.budget,
        ..Default::default()
    });
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(chat))
        .route("/lookup", axum::routing::post(lookup))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir()?;
    let config = format!(
        "[[providers]]\nname = \"up\"\nkind = \"openai\"\nbase_url = \"{base}/v1\"\n\n\
         [[routes]]\nname = \"default\"\ntargets = [{{ provider = \"up\", model = \"double\" }}]\n\n\
         [[agents]]\nname = \"long\"\nroute = \"default\"\n\
         system_prompt = \"You are a patient assistant who files reports.\"\n\n\
         [agents.context]\nmax_prompt_tokens = {budget}\nstrategy = \"summarize\"\n\n\
         [[agents.tools]]\nname = \"memory\"\nkind = \"memory_block\"\n\
         description = \"Keep a fact for the rest of the conversation\"\n\n\
         [[agents.tools]]\nname = \"lookup\"\nkind = \"webhook\"\nurl = \"{base}/lookup\"\n\
         description = \"Look up the record of a report\"\n",
        budget = args.budget,
    );
    let server = ServeProcess::start(dir.path(), &config)?;
    let http = reqwest::Client::new();
    let session = crate::eval::post_json(
        &http,
        &format!("{}/v1/sessions", server.base),
        &json!({"agent": "long"}),
    )
    .await?;
    let id = session["id"].as_str().context("no session id")?.to_string();
    let report = format!(
        "{} ",
        "the quarterly figures rose in the north and fell in the south;".repeat(19)
    );
    let started = Instant::now();
    let mut times = Vec::with_capacity(args.turns);
    let mut failed_turns = 0;
    let mut last_reply = String::new();
    for n in 0..args.turns {
        let text = match n {
            0 => "Remember the code word HERON.".to_string(),
            n if n + 1 == args.turns => "What is the code word?".to_string(),
            n => format!("Report {n}: {report}"),
        };
        let turn = Instant::now();
        let answer = crate::eval::post_json(
            &http,
            &format!("{}/v1/sessions/{id}/messages?wait=true", server.base),
            &json!({"text": text}),
        )
        .await?;
        times.push(turn.elapsed().as_secs_f64() * 1e3);
        if answer["status"] != "idle" {
            failed_turns += 1;
        }
        last_reply = answer["reply"].as_str().unwrap_or_default().to_string();
        if (n + 1) % 50 == 0 {
            eprintln!("[{}/{}] turns", n + 1, args.turns);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    // The journal, page by page.
    let mut kinds: Vec<String> = Vec::new();
    let mut after = 0;
    loop {
        let page = crate::eval::get_json(
            &http,
            &format!(
                "{}/v1/sessions/{id}/events?after={after}&limit=1000",
                server.base
            ),
        )
        .await?;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        let Some(last) = events.last() else { break };
        after = last["seq"].as_i64().unwrap_or(after);
        kinds.extend(
            events
                .iter()
                .filter_map(|e| e["kind"].as_str().map(str::to_string)),
        );
    }
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    let agent_calls = count("model_call_started");
    let compactions = count("context_compacted");
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| times[((p * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1];
    let summary_share = compactions as f64 / (agent_calls + compactions).max(1) as f64;
    let recalled = last_reply.contains("HERON");
    let result = json!({
        "turns": args.turns,
        "budget_tokens": args.budget,
        "failed_turns": failed_turns + count("model_call_failed"),
        "largest_prompt_tokens": seen.largest.load(Ordering::SeqCst),
        "prompts_over_budget": seen.over_budget.load(Ordering::SeqCst),
        "agent_model_calls": agent_calls,
        "compactions": compactions,
        "summariser_calls": seen.summaries.load(Ordering::SeqCst),
        "summariser_share_of_model_calls": summary_share,
        "fact_recalled_at_last_turn": recalled,
        "last_reply": last_reply,
        "turn_ms_p50": pct(0.5),
        "turn_ms_p99": pct(0.99),
        "seconds": elapsed,
        "targets": { "failed_turns": 0, "prompts_over_budget": 0, "summariser_share_of_model_calls": 0.10, "fact_recalled_at_last_turn": true },
    });
    if args.json {
        println!("{result}");
    } else {
        println!(
            "{} turns on a {}-token budget: {} failed; largest prompt {} tokens, {} over the budget; \
             {} compactions for {} agent model calls (summaries {:.1} % of model calls, target ≤ 10 %); \
             fact from turn 1 recalled at turn {}: {}; turn p50 {:.1} ms, p99 {:.1} ms ({:.0} s)",
            args.turns,
            args.budget,
            result["failed_turns"],
            result["largest_prompt_tokens"],
            result["prompts_over_budget"],
            compactions,
            agent_calls,
            100.0 * summary_share,
            args.turns,
            if recalled { "yes" } else { "NO" },
            pct(0.5),
            pct(0.99),
            elapsed,
        );
    }
    anyhow::ensure!(
        result["failed_turns"] == 0 && result["prompts_over_budget"] == 0 && recalled,
        "the session did not hold: {result}"
    );
    Ok(())
}

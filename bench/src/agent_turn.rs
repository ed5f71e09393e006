//! The agent-turn part of `stead bench inference`: one turn of the demo agent on the local
//! model, `steps` model calls long, each followed by its tool's result, so the prompt grows
//! every step (the system prompt, the tools, then ~200 tokens a step). Run twice on fresh
//! pools, with the prefix cache off and on; both must make the same calls (greedy), and the
//! time to first token of the later steps is compared.

use anyhow::Context;
use serde_json::{json, Value};
use stead_inference::pool::{InferencePool, PoolConfig, DEFAULT_PREFIX_CACHE_BYTES};
use stead_inference::{ChatMessage, ChatRequest, Role, SamplingParams, ToolChoice, ToolSpec};

use stead_config::Config;

/// The demo agent's system prompt and tools, as the session actor sends them.
async fn demo_agent(config: &Config) -> anyhow::Result<(String, Vec<ToolSpec>)> {
    let defaults = Config::default();
    let agent = defaults
        .agents
        .first()
        .context("the built-in configuration has no agent")?;
    // The memory tools need a store to be built; only their schemas are used.
    let database = super::BenchDatabase::create(config, crate::cli::BenchBackend::Sqlite).await?;
    let options = stead_persistence::StoreOptions::new(database.url.clone());
    let store = stead_persistence::open(options).await?;
    let built = stead_agents::build_agent(
        agent,
        &(store.clone() as std::sync::Arc<dyn stead_persistence::Kv>),
        &stead_agents::webhook_client()?,
        None,
    )?;
    let tools = built
        .tools
        .values()
        .map(|t| ToolSpec {
            name: t.name().to_string(),
            description: t.description().to_string(),
            parameters: t.parameters(),
        })
        .collect();
    store.shutdown().await;
    database.remove().await?;
    Ok((built.system_prompt, tools))
}

/// What the `remember` tool answers at `step`: the notes so far (~150 tokens).
fn tool_result(step: usize) -> String {
    let notes: Vec<Value> = (0..6)
        .map(|i| {
            json!({
                "key": format!("note-{step}-{i}"),
                "value": format!("meeting {i} of step {step}: bring the report, check the \
                                   figures with finance")
            })
        })
        .collect();
    json!({ "ok": true, "notes": notes }).to_string()
}

struct Step {
    prompt_tokens: usize,
    cached_tokens: usize,
    ttft_ms: f64,
    call: Option<(String, String)>,
}

async fn run_turn(
    config: PoolConfig,
    steps: usize,
    system: &str,
    tools: &[ToolSpec],
) -> anyhow::Result<(Vec<Step>, Vec<Vec<u32>>)> {
    let pool = InferencePool::start(config).await?;
    // Warm-up with another prompt: the first run pays one-time allocations.
    let warm = ChatRequest {
        messages: vec![ChatMessage::user("Hello.")],
        sampling: SamplingParams {
            max_tokens: 4,
            ..Default::default()
        },
        ..Default::default()
    };
    pool.complete(warm).await?;
    let mut messages = vec![
        ChatMessage::system(system),
        ChatMessage::user(
            "Please remember each of my meetings for this week, one note at a time, and \
             list what you have after each one.",
        ),
    ];
    let mut out = Vec::new();
    let mut prompts = Vec::new();
    for step in 0..steps {
        let request = ChatRequest {
            messages: messages.clone(),
            tools: tools.to_vec(),
            tool_choice: ToolChoice::Function("remember".into()),
            sampling: SamplingParams {
                max_tokens: 48,
                ..Default::default()
            },
            ..Default::default()
        };
        prompts.push(pool.prompt_tokens(request.clone())?);
        let completion = pool.complete(request).await?;
        let call = completion.tool_calls.first().cloned();
        let mut assistant = ChatMessage::new(Role::Assistant, completion.text.clone());
        let id = format!("call_{step}");
        if let Some(call) = &call {
            assistant.tool_calls = vec![stead_inference::ToolCall {
                id: id.clone(),
                ..call.clone()
            }];
        }
        messages.push(assistant);
        let mut result = ChatMessage::new(Role::Tool, tool_result(step));
        result.tool_call_id = Some(id);
        messages.push(result);
        out.push(Step {
            prompt_tokens: completion.usage.prompt_tokens,
            cached_tokens: completion.cached_prompt_tokens,
            ttft_ms: completion.timings.ttft_ms,
            call: call.map(|c| (c.name, c.arguments)),
        });
        eprint!("\r  progress: {}/{steps} steps", step + 1);
    }
    eprintln!();
    pool.shutdown().await;
    Ok((out, prompts))
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Runs the turn with the prefix cache off, then on, and reports both; also returns each
/// step's prompt as token ids, for the peer.
pub async fn agent_turn(
    config: &Config,
    base: &PoolConfig,
    steps: usize,
) -> anyhow::Result<(Value, Vec<Vec<u32>>)> {
    let (system, tools) = demo_agent(config).await?;
    let mut off = base.clone();
    off.prefix_cache_bytes = 0;
    eprintln!("agent turn: {steps} steps, prefix cache off");
    let (cold, _) = run_turn(off, steps, &system, &tools).await?;
    let mut on = base.clone();
    on.prefix_cache_bytes = DEFAULT_PREFIX_CACHE_BYTES;
    eprintln!("agent turn: {steps} steps, prefix cache on");
    let (warm, prompts) = run_turn(on, steps, &system, &tools).await?;
    for (i, (a, b)) in cold.iter().zip(&warm).enumerate() {
        anyhow::ensure!(
            a.call == b.call && a.prompt_tokens == b.prompt_tokens,
            "step {i}: the cached run called {:?}, the uncached one {:?}",
            b.call,
            a.call
        );
    }
    let later = |run: &[Step]| -> Vec<f64> { run.iter().skip(1).map(|s| s.ttft_ms).collect() };
    let (off_ms, on_ms) = (median(&later(&cold)), median(&later(&warm)));
    let report = json!({
        "steps": steps,
        "prompt_tokens": warm.iter().map(|s| s.prompt_tokens).collect::<Vec<_>>(),
        "cached_tokens": warm.iter().map(|s| s.cached_tokens).collect::<Vec<_>>(),
        "ttft_ms_off": cold.iter().map(|s| s.ttft_ms).collect::<Vec<_>>(),
        "ttft_ms_on": warm.iter().map(|s| s.ttft_ms).collect::<Vec<_>>(),
        "later_steps_ttft_ms_p50_off": off_ms,
        "later_steps_ttft_ms_p50_on": on_ms,
        "later_steps_on_over_off": if off_ms > 0.0 { on_ms / off_ms } else { 0.0 },
        "calls_made": warm.iter().filter(|s| s.call.is_some()).count(),
    });
    Ok((report, prompts))
}

//! `stead eval tools`: how well the local model picks tools for the demo agent's first call.
//!
//! Forty fixed prompts — twenty that clearly ask for one of the demo agent's tools (five each
//! for `remember`, `forget`, `clock` and `calculator`) and twenty that ask for none — each sent
//! as the first message of a new `demo` session on a `stead serve` child process with the
//! built-in configuration, whose model is the one prepared in the data directory. The first
//! model call of each turn is read back from the session's journal: a prompt that asks for a
//! tool scores when that call asks for the right tool; a prompt that does not counts against
//! the model when the call asks for any tool. Targets: right tool ≥ 80 %, unasked
//! ≤ 10 %. Greedy decoding makes a run repeatable on one machine.

use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};

use crate::cli::EvalToolsArgs;
use stead_config::Config;

/// Prompts that ask for a tool, with the tool they ask for.
pub const TOOL_PROMPTS: [(&str, &str); 20] = [
    ("remember", "Remember that my favourite colour is green."),
    (
        "remember",
        "Please note that the meeting is on Friday at 3pm.",
    ),
    ("remember", "Save a note: buy milk and eggs."),
    ("remember", "Store this for later: my locker code is 4512."),
    ("remember", "Make a note that Anna's birthday is 12 May."),
    ("forget", "Forget the note about my locker code."),
    ("forget", "Delete the note called shopping."),
    ("forget", "Please remove my saved note about the meeting."),
    ("forget", "Erase the note 'wifi password'."),
    ("forget", "Forget what I told you about Anna's birthday."),
    ("clock", "What time is it now?"),
    ("clock", "What is today's date?"),
    ("clock", "Tell me the current time in UTC."),
    ("clock", "Which day of the week is it today?"),
    ("clock", "How late is it right now?"),
    ("calculator", "What is 1234 * 5678?"),
    ("calculator", "Calculate (17 + 25) * 3."),
    ("calculator", "What is 2 to the power of 20?"),
    ("calculator", "How much is 987654 divided by 321?"),
    ("calculator", "Compute 15% of 2400."),
];

/// Prompts that ask for no tool.
pub const PLAIN_PROMPTS: [&str; 20] = [
    "Hello! How are you?",
    "Write a haiku about the sea.",
    "What is the capital of Japan?",
    "Translate 'good morning' into French.",
    "Tell me a short joke.",
    "Who wrote Romeo and Juliet?",
    "Explain what a black hole is in one sentence.",
    "Suggest a name for a pet goldfish.",
    "What is the opposite of 'cold'?",
    "Give me three tips for better sleep.",
    "Thanks, that was helpful!",
    "What does HTML stand for?",
    "Write one sentence about autumn leaves.",
    "Is a tomato a fruit or a vegetable?",
    "What colour is the sky on a clear day?",
    "How many legs does a spider have?",
    "Recommend a classic novel.",
    "What is photosynthesis?",
    "Say something encouraging.",
    "What language is spoken in Brazil?",
];

/// One prompt's outcome.
struct Outcome {
    prompt: &'static str,
    expected: Option<&'static str>,
    called: Vec<String>,
    arguments: Vec<Value>,
    text: String,
    seconds: f64,
}

impl Outcome {
    fn right(&self) -> bool {
        self.expected
            .is_some_and(|want| self.called.first().map(String::as_str) == Some(want))
    }

    fn json(&self) -> Value {
        json!({
            "prompt": self.prompt,
            "expected": self.expected,
            "called": self.called,
            "arguments": self.arguments,
            "text": self.text,
            "seconds": self.seconds,
        })
    }
}

pub async fn tools(config: Config, args: EvalToolsArgs) -> anyhow::Result<()> {
    let (_scratch, server, model) = super::scratch_server(&config, None)?;
    let http = reqwest::Client::new();

    let limit = args.limit.unwrap_or(usize::MAX);
    let asked: Vec<(Option<&'static str>, &'static str)> = TOOL_PROMPTS
        .iter()
        .take(limit)
        .map(|&(tool, prompt)| (Some(tool), prompt))
        .chain(PLAIN_PROMPTS.iter().take(limit).map(|&p| (None, p)))
        .collect();
    let mut outcomes = Vec::new();
    for (i, &(expected, prompt)) in asked.iter().enumerate() {
        let outcome = run_prompt(&http, &server.base, expected, prompt).await?;
        eprintln!(
            "[{}/{}] {:<10} → {:<10} {:.1} s  {prompt}",
            i + 1,
            asked.len(),
            expected.unwrap_or("(none)"),
            outcome.called.first().map_or("(text)", String::as_str),
            outcome.seconds
        );
        outcomes.push(outcome);
    }

    let (tool, plain): (Vec<&Outcome>, Vec<&Outcome>) =
        outcomes.iter().partition(|o| o.expected.is_some());
    let right = tool.iter().filter(|o| o.right()).count();
    let any_call = tool.iter().filter(|o| !o.called.is_empty()).count();
    let unasked = plain.iter().filter(|o| !o.called.is_empty()).count();
    let share = |n: usize, of: usize| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    let result = json!({
        "model": model,
        "agent": "demo",
        "tool_prompts": tool.len(),
        "right_tool": right,
        "right_tool_share": share(right, tool.len()),
        "any_tool_when_asked": any_call,
        "plain_prompts": plain.len(),
        "unasked_tool": unasked,
        "unasked_tool_share": share(unasked, plain.len()),
        "targets": { "right_tool_share": 0.8, "unasked_tool_share": 0.1 },
        "prompts": outcomes.iter().map(Outcome::json).collect::<Vec<_>>(),
    });
    if args.json {
        println!("{result}");
    } else {
        println!(
            "{model}: right tool {right}/{} ({:.0} %, target ≥ 80 %), a tool when asked {any_call}/{}; unasked tool {unasked}/{} ({:.0} %, target ≤ 10 %)",
            tool.len(),
            100.0 * share(right, tool.len()),
            tool.len(),
            plain.len(),
            100.0 * share(unasked, plain.len()),
        );
    }
    Ok(())
}

/// Sends `prompt` as the first message of a new demo session and reads its first model call.
async fn run_prompt(
    http: &reqwest::Client,
    base: &str,
    expected: Option<&'static str>,
    prompt: &'static str,
) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let session: Value = super::post_json(
        http,
        &format!("{base}/v1/sessions"),
        &json!({ "agent": "demo" }),
    )
    .await?;
    let id = session["id"].as_str().context("no session id")?;
    http.post(format!("{base}/v1/sessions/{id}/messages?wait=true"))
        .json(&json!({ "text": prompt }))
        .send()
        .await?
        .error_for_status()?;
    let page: Value =
        super::get_json(http, &format!("{base}/v1/sessions/{id}/events?limit=1000")).await?;
    let first = page["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["kind"] == "model_call_finished"))
        .with_context(|| format!("no model call finished for {prompt:?}: {page}"))?;
    let calls = first["payload"]["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // Closes the session so that a parked approval does not linger.
    http.delete(format!("{base}/v1/sessions/{id}"))
        .send()
        .await?;
    Ok(Outcome {
        prompt,
        expected,
        called: calls
            .iter()
            .filter_map(|c| c["tool"].as_str())
            .map(str::to_string)
            .collect(),
        arguments: calls.iter().map(|c| c["arguments"].clone()).collect(),
        text: first["payload"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

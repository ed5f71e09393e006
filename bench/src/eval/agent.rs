//! `stead eval agent`: whole turns and conversations of the built-in `demo` agent, graded on
//! what a person sees. Each case (`agent-cases.toml`, or a file given with `--cases`) is a fresh
//! session and one or more user messages; approvals are decided as the case says. A turn is
//! graded on the tools it called (names in order, argument matchers), its reply (contains /
//! does not contain), and always on the reply being neither empty nor tool-call text (the
//! check `stead_actors::reply::problem` makes) and on its wall time. The summary has the
//! targets of the agent-quality work: pass rate, replies with tool-call text, empty replies, asked-for tool
//! chosen, unasked tool, turn and later-step first-token times. Greedy decoding makes a run
//! repeatable on one machine.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::cli::EvalAgentArgs;
use stead_config::Config;

/// The cases that ship with Stead.
pub const CASES: &str = include_str!("agent-cases.toml");

/// A turn's wall-time bound when its case names none.
const DEFAULT_MAX_SECONDS: f64 = 60.0;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    case: Vec<Case>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    turn: Vec<TurnCase>,
}

/// One user message of a case and what its turn must do.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnCase {
    user: String,
    /// The tools the turn calls, by name, in order (`[]`: none). Absent: not graded.
    #[serde(default)]
    tools: Option<Vec<String>>,
    /// Matchers on the arguments of the turn's calls.
    #[serde(default)]
    args: Vec<ArgMatch>,
    /// Every string must be in the reply (case-insensitive).
    #[serde(default)]
    reply_contains: Vec<String>,
    /// At least one string must be in the reply (case-insensitive).
    #[serde(default)]
    reply_contains_any: Vec<String>,
    /// No string may be in the reply (case-insensitive).
    #[serde(default)]
    reply_not_contains: Vec<String>,
    /// How approvals this turn asks for are decided (absent: the turn must ask for none; one
    /// that comes anyway is rejected and fails the turn).
    #[serde(default)]
    approve: Option<bool>,
    /// The turn's wall-time bound in seconds.
    #[serde(default)]
    max_seconds: Option<f64>,
}

/// A matcher on one argument of the turn's first call of `tool`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArgMatch {
    tool: String,
    field: String,
    /// The argument equals this JSON value.
    #[serde(default)]
    equals: Option<Value>,
    /// The argument, as text, contains this (case-insensitive).
    #[serde(default)]
    contains: Option<String>,
}

/// What one turn did, read back from the journal.
#[derive(Debug, Default)]
struct TurnOutcome {
    user: String,
    calls: Vec<(String, Value)>,
    reply: String,
    fallback: bool,
    /// `reply_rejected` events (each a repair call or the built reply).
    rejected: usize,
    approvals: usize,
    seconds: f64,
    /// First-token times of the turn's model calls after its first (ms).
    later_ttft_ms: Vec<f64>,
    failures: Vec<String>,
}

impl TurnOutcome {
    fn json(&self) -> Value {
        json!({
            "user": self.user,
            "calls": self.calls.iter().map(|(t, a)| json!({ "tool": t, "arguments": a })).collect::<Vec<_>>(),
            "reply": self.reply,
            "fallback": self.fallback,
            "rejected_replies": self.rejected,
            "approvals": self.approvals,
            "seconds": self.seconds,
            "failures": self.failures,
        })
    }
}

pub async fn agent(config: Config, args: EvalAgentArgs) -> anyhow::Result<()> {
    let text = match &args.cases {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?,
        None => CASES.to_string(),
    };
    let cases = parse_cases(&text)?;
    let (_scratch, server, model) = super::scratch_server(&config, args.model.as_deref())?;
    let http = reqwest::Client::new();
    let tools = demo_tool_names(&http, &server.base).await?;
    let cases: Vec<Case> = cases
        .into_iter()
        .take(args.limit.unwrap_or(usize::MAX))
        .collect();
    let mut results = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let turns = run_case(&http, &server.base, case, &tools).await?;
        let passed = turns.iter().all(|t| t.failures.is_empty());
        eprintln!(
            "[{}/{}] {} {:<36} {}",
            i + 1,
            cases.len(),
            if passed { "pass" } else { "FAIL" },
            case.name,
            turns
                .iter()
                .map(|t| format!(
                    "{:.1} s {:?}{}",
                    t.seconds,
                    t.reply,
                    if t.failures.is_empty() {
                        String::new()
                    } else {
                        format!(" ✗ {}", t.failures.join("; "))
                    }
                ))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        results.push((case, turns, passed));
    }
    let summary = summarize(&model, &tools, &results, &cases);
    if args.json {
        println!("{summary}");
    } else {
        println!(
            "{model}: {}/{} cases pass ({:.0} %, target ≥ 90 %); replies with tool-call text {} \
             (target 0), empty replies {} (target 0); asked-for tool chosen {:.0} % (target ≥ 95 %), \
             unasked tool {:.0} % (target ≤ 5 %); built replies {}, repair calls {}; \
             turn p50 {:.1} s, one-tool turn p50 {:.1} s (target ≤ 8 s), later-step first token \
             p50 {:.0} ms (target ≤ 600 ms)",
            summary["passed"],
            summary["cases"],
            100.0 * summary["pass_rate"].as_f64().unwrap_or(0.0),
            summary["replies_with_call_text"],
            summary["empty_replies"],
            100.0 * summary["asked_tool_chosen"].as_f64().unwrap_or(0.0),
            100.0 * summary["unasked_tool"].as_f64().unwrap_or(0.0),
            summary["built_replies"],
            summary["repair_calls"],
            summary["turn_seconds_p50"].as_f64().unwrap_or(0.0),
            summary["one_tool_turn_seconds_p50"].as_f64().unwrap_or(0.0),
            summary["later_step_ttft_ms_p50"].as_f64().unwrap_or(0.0),
        );
    }
    if let Some(floor) = args.fail_under {
        let rate = summary["pass_rate"].as_f64().unwrap_or(0.0);
        anyhow::ensure!(
            rate >= floor,
            "pass rate {rate:.3} is under --fail-under {floor}"
        );
    }
    Ok(())
}

fn parse_cases(text: &str) -> anyhow::Result<Vec<Case>> {
    let file: CaseFile = toml::from_str(text).context("the cases do not parse")?;
    for case in &file.case {
        anyhow::ensure!(!case.turn.is_empty(), "case `{}` has no turn", case.name);
        for turn in &case.turn {
            for matcher in &turn.args {
                anyhow::ensure!(
                    matcher.equals.is_some() || matcher.contains.is_some(),
                    "case `{}`: an argument matcher needs `equals` or `contains`",
                    case.name
                );
            }
        }
    }
    Ok(file.case)
}

/// The names of the demo agent's tools (the reply check needs them).
async fn demo_tool_names(http: &reqwest::Client, base: &str) -> anyhow::Result<Vec<String>> {
    let agents: Value = super::get_json(http, &format!("{base}/v1/agents")).await?;
    let demo = agents["agents"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["name"] == "demo"))
        .context("the server has no `demo` agent")?;
    Ok(demo["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect())
}

/// Runs a case in a fresh session, one turn after another.
async fn run_case(
    http: &reqwest::Client,
    base: &str,
    case: &Case,
    tools: &[String],
) -> anyhow::Result<Vec<TurnOutcome>> {
    let session: Value = super::post_json(
        http,
        &format!("{base}/v1/sessions"),
        &json!({ "agent": "demo" }),
    )
    .await?;
    let id = session["id"].as_str().context("no session id")?.to_string();
    let mut after = 0;
    let mut outcomes = Vec::new();
    for turn in &case.turn {
        let (outcome, last_seq) = run_turn(http, base, &id, after, turn, tools).await?;
        after = last_seq;
        outcomes.push(outcome);
    }
    // Closed so that nothing of it lingers (a parked approval, a schedule).
    http.delete(format!("{base}/v1/sessions/{id}"))
        .send()
        .await?;
    Ok(outcomes)
}

async fn run_turn(
    http: &reqwest::Client,
    base: &str,
    id: &str,
    after: i64,
    turn: &TurnCase,
    tools: &[String],
) -> anyhow::Result<(TurnOutcome, i64)> {
    let started = Instant::now();
    let mut status: Value = super::post_json(
        http,
        &format!("{base}/v1/sessions/{id}/messages?wait=true"),
        &json!({ "text": turn.user }),
    )
    .await?;
    let mut outcome = TurnOutcome {
        user: turn.user.clone(),
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        match status["status"].as_str() {
            Some("awaiting_approval") => {
                for approval in status["pending_approvals"].as_array().into_iter().flatten() {
                    outcome.approvals += 1;
                    let approved = turn.approve.unwrap_or_else(|| {
                        outcome.failures.push(format!(
                            "asked for an approval of `{}` that the case does not expect",
                            approval["tool"].as_str().unwrap_or_default()
                        ));
                        false
                    });
                    let call_id = approval["call_id"].as_str().unwrap_or_default();
                    http.post(format!("{base}/v1/sessions/{id}/approvals/{call_id}"))
                        .json(&json!({ "approved": approved, "reason": (!approved).then_some("not now") }))
                        .send()
                        .await?
                        .error_for_status()?;
                }
            }
            Some("running") => {}
            _ => break,
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the turn {:?} did not end in 10 minutes",
            turn.user
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        status = super::get_json(http, &format!("{base}/v1/sessions/{id}")).await?;
    }
    outcome.seconds = started.elapsed().as_secs_f64();
    let page: Value = super::get_json(
        http,
        &format!("{base}/v1/sessions/{id}/events?after={after}&limit=1000"),
    )
    .await?;
    let events = page["events"].as_array().cloned().unwrap_or_default();
    let mut model_calls = 0;
    for event in &events {
        let payload = &event["payload"];
        match event["kind"].as_str().unwrap_or_default() {
            "tool_call_requested" => outcome.calls.push((
                payload["tool"].as_str().unwrap_or_default().to_string(),
                payload["arguments"].clone(),
            )),
            "assistant_message" => {
                outcome.reply = payload["text"].as_str().unwrap_or_default().to_string();
                outcome.fallback = payload["fallback"] == true;
            }
            "reply_rejected" => outcome.rejected += 1,
            "model_call_finished" => {
                model_calls += 1;
                if model_calls > 1 {
                    if let Some(ms) = payload["ttft_ms"].as_f64() {
                        outcome.later_ttft_ms.push(ms);
                    }
                }
            }
            _ => {}
        }
    }
    let last_seq = page["last_seq"].as_i64().unwrap_or(after);
    grade(turn, tools, &mut outcome);
    Ok((outcome, last_seq))
}

/// Adds the turn's failed checks to `outcome.failures`.
fn grade(turn: &TurnCase, tools: &[String], outcome: &mut TurnOutcome) {
    let names: Vec<&str> = tools.iter().map(String::as_str).collect();
    let reply = outcome.reply.to_lowercase();
    let failures = &mut outcome.failures;
    match stead_actors::reply::problem(&outcome.reply, &names, &[]) {
        Some(problem) => failures.push(format!("the reply is unusable: {problem}")),
        None if outcome.fallback => {
            failures.push("the reply was built from the results: the model gave none".into())
        }
        None => {}
    }
    let called: Vec<&str> = outcome.calls.iter().map(|(t, _)| t.as_str()).collect();
    if let Some(expected) = &turn.tools {
        if called != *expected {
            failures.push(format!("called {called:?}, expected {expected:?}"));
        }
    }
    for matcher in &turn.args {
        let Some((_, arguments)) = outcome.calls.iter().find(|(t, _)| *t == matcher.tool) else {
            failures.push(format!("no `{}` call to match arguments of", matcher.tool));
            continue;
        };
        let value = &arguments[&matcher.field];
        if let Some(want) = &matcher.equals {
            if value != want {
                failures.push(format!(
                    "`{}.{}` is {value}, expected {want}",
                    matcher.tool, matcher.field
                ));
            }
        }
        if let Some(part) = &matcher.contains {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if !text.to_lowercase().contains(&part.to_lowercase()) {
                failures.push(format!(
                    "`{}.{}` is {value}, expected it to contain {part:?}",
                    matcher.tool, matcher.field
                ));
            }
        }
    }
    for part in &turn.reply_contains {
        if !reply.contains(&part.to_lowercase()) {
            failures.push(format!("the reply lacks {part:?}"));
        }
    }
    if !turn.reply_contains_any.is_empty()
        && !turn
            .reply_contains_any
            .iter()
            .any(|p| reply.contains(&p.to_lowercase()))
    {
        failures.push(format!(
            "the reply has none of {:?}",
            turn.reply_contains_any
        ));
    }
    for part in &turn.reply_not_contains {
        if reply.contains(&part.to_lowercase()) {
            failures.push(format!("the reply has {part:?}"));
        }
    }
    let bound = turn.max_seconds.unwrap_or(DEFAULT_MAX_SECONDS);
    if outcome.seconds > bound {
        failures.push(format!("took {:.1} s (bound {bound} s)", outcome.seconds));
    }
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

fn summarize(
    model: &str,
    tools: &[String],
    results: &[(&Case, Vec<TurnOutcome>, bool)],
    cases: &[Case],
) -> Value {
    let turns: Vec<(&TurnCase, &TurnOutcome)> = results
        .iter()
        .flat_map(|(case, outcomes, _)| case.turn.iter().zip(outcomes.iter()))
        .collect();
    let share = |n: usize, of: usize| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    let passed = results.iter().filter(|(_, _, p)| *p).count();
    let empty = turns
        .iter()
        .filter(|(_, o)| !o.reply.chars().any(char::is_alphanumeric))
        .count();
    let names: Vec<&str> = tools.iter().map(String::as_str).collect();
    let call_text = turns
        .iter()
        .filter(|(_, o)| {
            o.reply.chars().any(char::is_alphanumeric)
                && stead_actors::reply::problem(&o.reply, &names, &[]).is_some()
        })
        .count();
    let asked: Vec<_> = turns
        .iter()
        .filter(|(t, _)| t.tools.as_ref().is_some_and(|t| !t.is_empty()))
        .collect();
    let chosen = asked
        .iter()
        .filter(|(t, o)| {
            o.calls.first().map(|(name, _)| name) == t.tools.as_ref().and_then(|t| t.first())
        })
        .count();
    let plain: Vec<_> = turns
        .iter()
        .filter(|(t, _)| t.tools.as_ref().is_some_and(Vec::is_empty))
        .collect();
    let unasked = plain.iter().filter(|(_, o)| !o.calls.is_empty()).count();
    let mut seconds: Vec<f64> = turns.iter().map(|(_, o)| o.seconds).collect();
    let mut one_tool: Vec<f64> = turns
        .iter()
        .filter(|(_, o)| o.calls.len() == 1 && o.approvals == 0)
        .map(|(_, o)| o.seconds)
        .collect();
    let mut later: Vec<f64> = turns
        .iter()
        .flat_map(|(_, o)| o.later_ttft_ms.iter().copied())
        .collect();
    json!({
        "model": model,
        "agent": "demo",
        "cases": cases.len(),
        "passed": passed,
        "pass_rate": share(passed, cases.len()),
        "turns": turns.len(),
        "replies_with_call_text": call_text,
        "empty_replies": empty,
        "built_replies": turns.iter().filter(|(_, o)| o.fallback).count(),
        "repair_calls": turns.iter().map(|(_, o)| o.rejected).sum::<usize>()
            - turns.iter().filter(|(_, o)| o.fallback).count(),
        "asked_tool_turns": asked.len(),
        "asked_tool_chosen": share(chosen, asked.len()),
        "plain_turns": plain.len(),
        "unasked_tool": share(unasked, plain.len()),
        "turn_seconds_p50": percentile(&mut seconds.clone(), 0.5),
        "turn_seconds_p95": percentile(&mut seconds, 0.95),
        "one_tool_turns": one_tool.len(),
        "one_tool_turn_seconds_p50": percentile(&mut one_tool, 0.5),
        "later_step_ttft_ms_p50": percentile(&mut later, 0.5),
        "targets": {
            "pass_rate": 0.9, "replies_with_call_text": 0, "empty_replies": 0,
            "asked_tool_chosen": 0.95, "unasked_tool": 0.05,
            "one_tool_turn_seconds_p50": 8.0, "later_step_ttft_ms_p50": 600.0,
        },
        "results": results.iter().map(|(case, outcomes, passed)| json!({
            "case": case.name,
            "passed": passed,
            "turns": outcomes.iter().map(TurnOutcome::json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_cases_parse_and_cover_what_the_issue_asks() {
        let cases = parse_cases(CASES).unwrap();
        assert!(cases.len() >= 40, "{} cases", cases.len());
        let turns: Vec<&TurnCase> = cases.iter().flat_map(|c| c.turn.iter()).collect();
        let has = |f: &dyn Fn(&TurnCase) -> bool| turns.iter().any(|t| f(t));
        assert!(has(&|t| t.approve == Some(true)), "an approval approved");
        assert!(has(&|t| t.approve == Some(false)), "an approval rejected");
        assert!(
            has(&|t| t.tools.as_ref().is_some_and(|t| t.len() > 1)),
            "chained tools"
        );
        assert!(
            has(&|t| t.tools.as_ref().is_some_and(Vec::is_empty)),
            "no tool"
        );
        assert!(cases.iter().any(|c| c.turn.len() > 1), "follow-ups");
        let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), cases.len(), "case names are unique");
    }

    fn outcome(calls: Vec<(&str, Value)>, reply: &str) -> TurnOutcome {
        TurnOutcome {
            calls: calls.into_iter().map(|(t, a)| (t.to_string(), a)).collect(),
            reply: reply.into(),
            seconds: 2.0,
            ..Default::default()
        }
    }

    fn turn(toml_text: &str) -> TurnCase {
        let case: CaseFile = toml::from_str(&format!(
            "[[case]]\nname = \"x\"\n[[case.turn]]\n{toml_text}"
        ))
        .unwrap();
        case.case[0].turn[0].clone()
    }

    #[test]
    fn grading_checks_tools_arguments_replies_and_time() {
        let tools = vec!["calculator".to_string(), "clock".to_string()];
        let case = turn(
            "user = \"What is 17 * 23?\"\ntools = [\"calculator\"]\nreply_contains = [\"391\"]\n\
             args = [{ tool = \"calculator\", field = \"expression\", contains = \"17\" }]",
        );
        let mut good = outcome(
            vec![("calculator", json!({"expression": "17 * 23"}))],
            "17 * 23 is 391.",
        );
        grade(&case, &tools, &mut good);
        assert!(good.failures.is_empty(), "{:?}", good.failures);

        let mut bad = outcome(
            vec![("clock", json!({}))],
            ">{\"name\": \"calculator\", \"arguments\": {}}",
        );
        bad.seconds = 99.0;
        grade(&case, &tools, &mut bad);
        assert_eq!(bad.failures.len(), 5, "{:?}", bad.failures);
        assert!(bad.failures[0].contains("tool call written as text"));

        let mut empty = outcome(vec![("calculator", json!({"expression": "1+2"}))], "");
        grade(&case, &tools, &mut empty);
        assert!(empty.failures.iter().any(|f| f.contains("empty")));
        assert!(empty
            .failures
            .iter()
            .any(|f| f.contains("expected it to contain \"17\"")));
    }
}

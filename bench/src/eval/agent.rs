//! `stead eval agent`: whole turns and conversations of the built-in `demo` agent on the local
//! model, graded on what a person sees. The cases are a dataset file
//! (`evals/datasets/demo-agent.jsonl`, or any dataset file with `--cases`), and the evaluation
//! engine runs them — the same `stead eval run` anyone can run on that file, here in a child
//! process on a scratch data directory beside the prepared models, with tools live (the demo
//! agent's are built-ins), and an approval no case expects failing its case. Each turn is graded
//! by its expectations (tools in order, argument matchers, reply contains / does not contain,
//! `reply_usable`: neither empty nor tool-call text nor built from the results, a wall-time
//! bound). The summary adds the targets of the agent-quality work: pass rate, replies with
//! tool-call text, empty replies, asked-for tool chosen, unasked tool, turn and later-step
//! first-token times. Greedy decoding makes a run repeatable on one machine.

use std::path::Path;
use std::process::Stdio;

use anyhow::Context;
use serde_json::{json, Value};
use stead_evals::run::CaseResult;
use stead_evals::{Case, Expectation};

use crate::cli::EvalAgentArgs;
use stead_config::Config;

/// The cases that ship with Stead, as a dataset file.
pub const CASES: &str = include_str!("../../../evals/datasets/demo-agent.jsonl");

/// The dataset's name in the scratch store.
const DATASET: &str = "demo-agent";

pub async fn agent(config: Config, args: EvalAgentArgs) -> anyhow::Result<()> {
    let text = match &args.cases {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?,
        None => CASES.to_string(),
    };
    let (_, mut cases) = stead_evals::jsonl::read(&text).context("the cases do not read")?;
    cases.truncate(args.limit.unwrap_or(usize::MAX));
    let (scratch, _, model) = super::scratch_dir(&config, args.model.as_deref())?;
    let file = scratch.path().join("cases.jsonl");
    std::fs::write(&file, stead_evals::jsonl::write(DATASET, 1, &cases))?;
    let import = stead(scratch.path())
        .args(["eval", "dataset", "import"])
        .arg(&file)
        .args(["--name", DATASET])
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(import.success(), "the cases could not be imported");
    // Progress goes to standard error as the run goes.
    let started = std::time::Instant::now();
    let output = stead(scratch.path())
        .args(["eval", "run", DATASET, "--tools", "live", "--side-effects"])
        .args(["--approvals", "fail", "--json", "--concurrency"])
        .arg(args.concurrency.max(1).to_string())
        .stderr(Stdio::inherit())
        .output()?;
    // The run's wall time, with its process's start (the model's load) and stop.
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    anyhow::ensure!(
        output.status.success(),
        "the evaluation run failed ({})",
        output.status
    );
    let run: Value =
        serde_json::from_slice(&output.stdout).context("the run's output is not JSON")?;
    let results: Vec<CaseResult> = serde_json::from_value(run["cases"].clone())?;
    // The scratch directory runs the built-in configuration's `demo` agent.
    let tools: Vec<String> = Config::default()
        .agents
        .iter()
        .find(|a| a.name == "demo")
        .map(|a| a.tools.iter().map(|t| t.name.clone()).collect())
        .unwrap_or_default();
    let mut summary = summarize(&model, &tools, &cases, &results, &run["id"]);
    summary["concurrency"] = json!(args.concurrency.max(1));
    summary["cases_per_minute"] = json!(results.len() as f64 / minutes);
    if args.json {
        println!("{summary}");
    } else {
        for result in &results {
            eprintln!(
                "{} {:<36} {}",
                if result.passed { "pass" } else { "FAIL" },
                result.name,
                result
                    .turns
                    .iter()
                    .map(|t| {
                        let failed: Vec<String> = t
                            .verdicts
                            .iter()
                            .filter(|v| !v.passed)
                            .map(|v| format!("{}: {}", v.grader, v.detail))
                            .collect();
                        format!(
                            "{:.1} s {:?}{}",
                            t.outcome.latency_ms / 1000.0,
                            t.outcome.reply,
                            if failed.is_empty() {
                                String::new()
                            } else {
                                format!(" ✗ {}", failed.join("; "))
                            }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
        }
        println!(
            "{model}: {}/{} cases pass ({:.0} %, target ≥ 90 %); replies with tool-call text {} \
             (target 0), empty replies {} (target 0); asked-for tool chosen {:.0} % (target ≥ 95 %), \
             unasked tool {:.0} % (target ≤ 5 %); built replies {}, repair calls {}; \
             turn p50 {:.1} s, one-tool turn p50 {:.1} s (target ≤ 8 s), later-step first token \
             p50 {:.0} ms (target ≤ 600 ms); {:.1} cases/min at concurrency {}; run {}",
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
            summary["cases_per_minute"].as_f64().unwrap_or(0.0),
            summary["concurrency"],
            run["id"],
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

/// This binary on the scratch directory: its `stead.toml` and SQLite store, nothing from the
/// caller's environment that would point elsewhere.
fn stead(dir: &Path) -> std::process::Command {
    let mut command =
        std::process::Command::new(std::env::current_exe().unwrap_or_else(|_| "stead".into()));
    command
        .arg("--config")
        .arg(dir.join("stead.toml"))
        .arg("--data-dir")
        .arg(dir)
        .env_remove("DATABASE_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env("RUST_LOG", "warn");
    command
}

/// The tools a turn's `tools` expectation names (`None`: the turn does not grade them).
fn expected_tools(expect: &[Expectation]) -> Option<&[String]> {
    expect.iter().find_map(|e| match e {
        Expectation::Tools { names } => Some(names.as_slice()),
        _ => None,
    })
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// The agent-quality figures of a run of `cases`.
fn summarize(
    model: &str,
    tools: &[String],
    cases: &[Case],
    results: &[CaseResult],
    run: &Value,
) -> Value {
    // Each turn with what it expected (by case id: results come in case order anyway).
    let turns: Vec<(Option<&[String]>, &stead_evals::outcome::TurnOutcome)> = results
        .iter()
        .flat_map(|result| {
            let case = cases.iter().find(|c| c.id == result.case_id);
            result.turns.iter().enumerate().map(move |(i, turn)| {
                let expect = case
                    .and_then(|c| c.turns.get(i))
                    .map_or(&[][..], |t| t.expect.as_slice());
                (expected_tools(expect), &turn.outcome)
            })
        })
        .collect();
    let share = |n: usize, of: usize| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    let passed = results.iter().filter(|r| r.passed).count();
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
        .filter(|(t, _)| t.is_some_and(|t| !t.is_empty()))
        .collect();
    let chosen = asked
        .iter()
        .filter(|(t, o)| o.calls.first().map(|c| &c.tool) == t.and_then(|t| t.first()))
        .count();
    let plain: Vec<_> = turns
        .iter()
        .filter(|(t, _)| t.is_some_and(<[String]>::is_empty))
        .collect();
    let unasked = plain.iter().filter(|(_, o)| !o.calls.is_empty()).count();
    let mut seconds: Vec<f64> = turns.iter().map(|(_, o)| o.latency_ms / 1000.0).collect();
    let mut one_tool: Vec<f64> = turns
        .iter()
        .filter(|(_, o)| o.calls.len() == 1 && o.calls[0].approval.is_none())
        .map(|(_, o)| o.latency_ms / 1000.0)
        .collect();
    let mut later: Vec<f64> = turns
        .iter()
        .flat_map(|(_, o)| o.ttft_ms.iter().skip(1).copied())
        .collect();
    let built = turns.iter().filter(|(_, o)| o.fallback).count();
    let rejected: u32 = turns.iter().map(|(_, o)| o.rejected_replies).sum();
    json!({
        "model": model,
        "agent": "demo",
        "run": run,
        "cases": results.len(),
        "passed": passed,
        "pass_rate": share(passed, results.len()),
        "turns": turns.len(),
        "replies_with_call_text": call_text,
        "empty_replies": empty,
        "built_replies": built,
        "repair_calls": (rejected as usize).saturating_sub(built),
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
        "results": results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_cases_read_and_cover_what_the_issue_asks() {
        let (header, cases) = stead_evals::jsonl::read(CASES).unwrap();
        assert_eq!(header.name, DATASET);
        assert!(cases.len() >= 40, "{} cases", cases.len());
        let turns: Vec<&stead_evals::case::CaseTurn> =
            cases.iter().flat_map(|c| c.turns.iter()).collect();
        let has = |f: &dyn Fn(&stead_evals::case::CaseTurn) -> bool| turns.iter().any(|t| f(t));
        assert!(has(&|t| t.approve() == Some(true)), "an approval approved");
        assert!(has(&|t| t.approve() == Some(false)), "an approval rejected");
        assert!(
            has(&|t| expected_tools(&t.expect).is_some_and(|t| t.len() > 1)),
            "chained tools"
        );
        assert!(
            has(&|t| expected_tools(&t.expect).is_some_and(<[String]>::is_empty)),
            "no tool"
        );
        assert!(cases.iter().any(|c| c.turns.len() > 1), "follow-ups");
        // Every turn is graded on its reply being usable and on its time.
        assert!(turns
            .iter()
            .all(|t| t.expect.contains(&Expectation::ReplyUsable)
                && t.expect
                    .iter()
                    .any(|e| matches!(e, Expectation::MaxLatencyMs { .. }))));
        let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), cases.len(), "case names are unique");
        assert!(cases
            .iter()
            .all(|c| c.agent == "demo" && c.source.is_none()));
    }
}

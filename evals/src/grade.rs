//! Grading a turn: each expectation of the case's turn gives a [`Verdict`]; a turn without
//! expectations is graded against its recording — the same tool calls with the same
//! arguments, and the same reply (or, with a judge route, a reply the judge calls
//! equivalent). A judge is any route asked for a strict JSON verdict.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::case::CaseTurn;
use crate::expect::{at_path, Expectation};
use crate::outcome::TurnOutcome;

/// One grader's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub grader: String,
    pub passed: bool,
    /// Why it failed (empty when it passed, except for a judge's verdict).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// A judge's reasoning, kept as it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

impl Verdict {
    fn of(grader: impl Into<String>, failure: Option<String>) -> Self {
        Verdict {
            grader: grader.into(),
            passed: failure.is_none(),
            detail: failure.unwrap_or_default(),
            reasoning: None,
        }
    }
}

/// A model asked to judge: one prompt to one route, the answer's text back.
#[async_trait]
pub trait Judge: Send + Sync {
    async fn ask(&self, route: &str, prompt: &str) -> Result<String, JudgeError>;
}

/// The judge's route could not answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct JudgeError(pub String);

/// What grading needs besides the turn: the agent's tool names (the reply check), and the
/// judge with the run's default route for it.
#[derive(Clone, Copy, Default)]
pub struct Grading<'a> {
    pub tools: &'a [String],
    pub judge: Option<&'a dyn Judge>,
    pub judge_route: Option<&'a str>,
}

/// The verdicts of one turn.
pub async fn grade(turn: &CaseTurn, actual: &TurnOutcome, how: Grading<'_>) -> Vec<Verdict> {
    let graders: Vec<&Expectation> = turn.expect.iter().filter(|e| e.grades()).collect();
    let mut verdicts = Vec::new();
    if !actual.finished() {
        verdicts.push(Verdict::of(
            "turn_finished",
            Some("the turn did not end".into()),
        ));
    }
    if graders.is_empty() {
        match &turn.recorded {
            Some(recorded) => verdicts.extend(against_recording(turn, recorded, actual, how).await),
            None => verdicts.push(check(&Expectation::ReplyUsable, actual, how)),
        }
        return verdicts;
    }
    for expectation in graders {
        verdicts.push(match expectation {
            Expectation::Judge { rubric, route } => {
                let route = route.as_deref().or(how.judge_route);
                judged(rubric, route, &turn.user, actual, how.judge).await
            }
            other => check(other, actual, how),
        });
    }
    verdicts
}

/// The verdict of an expectation that needs no model.
fn check(expectation: &Expectation, actual: &TurnOutcome, how: Grading<'_>) -> Verdict {
    let reply = actual.reply.to_lowercase();
    let names: Vec<&str> = actual.calls.iter().map(|c| c.tool.as_str()).collect();
    let failure =
        match expectation {
            Expectation::ToolCalled { tool, args } => {
                let calls: Vec<_> = actual.calls.iter().filter(|c| &c.tool == tool).collect();
                if calls.is_empty() {
                    Some(format!("`{tool}` was not called (called {names:?})"))
                } else {
                    // Some call of the tool must match every matcher.
                    let why: Vec<String> = calls
                        .iter()
                        .filter_map(|call| {
                            let failures: Vec<String> = args
                                .iter()
                                .filter_map(|(path, m)| {
                                    m.rejects(at_path(&call.arguments, path))
                                        .map(|why| format!("`{tool}.{path}` {why}"))
                                })
                                .collect();
                            (!failures.is_empty()).then(|| failures.join("; "))
                        })
                        .collect();
                    (why.len() == calls.len()).then(|| why.join(" | "))
                }
            }
            Expectation::Tools { names: want } => {
                (names != *want).then(|| format!("called {names:?}, expected {want:?}"))
            }
            Expectation::NoTool => (!names.is_empty()).then(|| format!("called {names:?}")),
            Expectation::ReplyContains { text } => (!reply.contains(&text.to_lowercase()))
                .then(|| format!("the reply lacks {text:?}: {:?}", actual.reply)),
            Expectation::ReplyContainsAny { texts } => {
                (!texts.iter().any(|t| reply.contains(&t.to_lowercase())))
                    .then(|| format!("the reply has none of {texts:?}: {:?}", actual.reply))
            }
            Expectation::ReplyNotContains { text } => reply
                .contains(&text.to_lowercase())
                .then(|| format!("the reply has {text:?}: {:?}", actual.reply)),
            Expectation::ReplyMatches { regex } => match regex::Regex::new(regex) {
                Ok(r) if r.is_match(&actual.reply) => None,
                Ok(_) => Some(format!("the reply does not match: {:?}", actual.reply)),
                Err(e) => Some(format!("not a regular expression: {e}")),
            },
            Expectation::ReplyJson { schema } => {
                match serde_json::from_str::<Value>(actual.reply.trim()) {
                    Err(e) => Some(format!("the reply is not JSON: {e}")),
                    Ok(value) => match jsonschema::validator_for(schema) {
                        Err(e) => Some(format!("not a JSON Schema: {e}")),
                        Ok(v) => v
                            .iter_errors(&value)
                            .next()
                            .map(|e| format!("the reply does not fit the schema: {e}")),
                    },
                }
            }
            Expectation::ReplyUsable => {
                let tools: Vec<&str> = how.tools.iter().map(String::as_str).collect();
                match stead_actors::reply::problem(&actual.reply, &tools, &[]) {
                    Some(problem) => Some(problem.to_string()),
                    None if actual.fallback => {
                        Some("the reply was built from the results: the model gave none".into())
                    }
                    None => None,
                }
            }
            Expectation::MaxSteps { steps } => (actual.model_calls > *steps)
                .then(|| format!("{} model calls (at most {steps})", actual.model_calls)),
            Expectation::MaxTokens { tokens } => (actual.tokens() > *tokens)
                .then(|| format!("{} tokens (at most {tokens})", actual.tokens())),
            Expectation::MaxLatencyMs { ms } => (actual.latency_ms > *ms)
                .then(|| format!("{:.0} ms (at most {ms})", actual.latency_ms)),
            Expectation::MaxCostUsd { usd } => (actual.cost_usd > *usd)
                .then(|| format!("${:.6} (at most ${usd})", actual.cost_usd)),
            Expectation::Judge { .. } | Expectation::Approve { .. } => None,
        };
    Verdict::of(expectation.name(), failure)
}

/// The recording as the baseline: the same calls with the same arguments, then the same reply
/// (or one the judge calls equivalent).
async fn against_recording(
    turn: &CaseTurn,
    recorded: &TurnOutcome,
    actual: &TurnOutcome,
    how: Grading<'_>,
) -> Vec<Verdict> {
    let steps = crate::diff::diff(recorded, actual);
    let changed: Vec<String> = steps
        .iter()
        .filter(|s| s.kind != crate::diff::Change::Same && s.kind != crate::diff::Change::Reply)
        .map(|s| s.detail.clone())
        .collect();
    let calls = Verdict::of(
        "recorded_calls",
        (!changed.is_empty()).then(|| changed.join("; ")),
    );
    let reply = match how.judge_route {
        Some(route) => {
            let rubric = format!(
                "The reply must say the same as this reference reply, in substance (wording may \
                 differ): {:?}",
                recorded.reply
            );
            let mut verdict = judged(&rubric, Some(route), &turn.user, actual, how.judge).await;
            verdict.grader = "recorded_reply (judged)".into();
            verdict
        }
        None => Verdict::of(
            "recorded_reply",
            (recorded.reply.trim() != actual.reply.trim()).then(|| {
                format!(
                    "the reply changed: {:?} → {:?}",
                    recorded.reply, actual.reply
                )
            }),
        ),
    };
    vec![calls, reply]
}

/// Asks the judge; the verdict is its answer read strictly as `{"pass": bool, "reason": text}`.
async fn judged(
    rubric: &str,
    route: Option<&str>,
    user: &str,
    actual: &TurnOutcome,
    judge: Option<&dyn Judge>,
) -> Verdict {
    let (Some(route), Some(judge)) = (route, judge) else {
        return Verdict::of("judge", Some("no judge route: name one for the run".into()));
    };
    let calls: Vec<String> = actual
        .calls
        .iter()
        .map(|c| format!("{}({})", c.tool, c.arguments))
        .collect();
    let prompt = format!(
        "You grade one answer of an AI assistant against a rubric.\n\nRubric: {rubric}\n\n\
         The user wrote: {user:?}\nThe assistant called these tools: {calls:?}\n\
         The assistant replied: {:?}\n\nAnswer with one JSON object and nothing else: \
         {{\"pass\": true or false, \"reason\": \"one sentence\"}}",
        actual.reply
    );
    let mut verdict = match judge.ask(route, &prompt).await {
        Err(e) => Verdict::of(
            "judge",
            Some(format!("the judge route `{route}` failed: {e}")),
        ),
        Ok(answer) => match read_verdict(&answer) {
            Some((pass, reason)) => Verdict {
                grader: "judge".into(),
                passed: pass,
                detail: if pass { String::new() } else { reason.clone() },
                reasoning: Some(reason),
            },
            None => Verdict {
                reasoning: Some(answer.clone()),
                ..Verdict::of(
                    "judge",
                    Some("the judge's answer is not a {\"pass\", \"reason\"} verdict".into()),
                )
            },
        },
    };
    verdict.grader = format!("judge via {route}");
    verdict
}

/// `{"pass": bool, "reason": text}`, the only JSON object in `answer` (code fences allowed).
fn read_verdict(answer: &str) -> Option<(bool, String)> {
    let start = answer.find('{')?;
    let end = answer.rfind('}')?;
    let value: Value = serde_json::from_str(answer.get(start..=end)?).ok()?;
    let object = value.as_object()?;
    if object.keys().any(|k| k != "pass" && k != "reason") {
        return None;
    }
    Some((
        object.get("pass")?.as_bool()?,
        object.get("reason")?.as_str()?.to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn verdicts_are_read_strictly() {
        assert_eq!(
            read_verdict("```json\n{\"pass\": true, \"reason\": \"ok\"}\n```"),
            Some((true, "ok".into()))
        );
        assert_eq!(
            read_verdict("{\"pass\": \"yes\", \"reason\": \"ok\"}"),
            None
        );
        assert_eq!(read_verdict("{\"pass\": true}"), None);
        assert_eq!(
            read_verdict("{\"pass\": true, \"reason\": \"r\", \"x\": 1}"),
            None
        );
        assert_eq!(read_verdict("I think it passes"), None);
        let _ = json!(null);
    }
}

//! Guardrails over a JSON value — a tool's result before the model sees it (docs/guardrails.md,
//! "Tool results"): every string in it is checked, redactions replace findings inside the
//! strings (the JSON stays valid), and each guardrail's verdict becomes a [`GuardrailCheck`]
//! the session journals (`guardrail_checked`): what it found where, and what it did — never a
//! value a `pii` guardrail found. Checks that ask a model run under the guardrail's deadline;
//! one that fails or misses it blocks, unless the guardrail says `on_error = "allow"`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use crate::judge::{self, Judge, JudgeError};
use crate::{Guardrail, GuardrailAction, GuardrailKind, OnError, Placeholders, Span};

/// What a guardrail's check came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum CheckOutcome {
    /// Nothing found.
    Clean,
    Found,
    /// The checker failed or missed its deadline (`reason` says which).
    Error,
}

/// What a check did to the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Let it through unchanged (nothing found, a checker error with `on_error = "allow"`).
    Pass,
    Redact,
    Block,
    Flag,
    /// Held it for a person.
    Approve,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Pass => "pass",
            Effect::Redact => "redact",
            Effect::Block => "block",
            Effect::Flag => "flag",
            Effect::Approve => "approve",
        }
    }
}

/// One finding in a checked value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Finding {
    /// The JSON pointer of the string it is in (`""`: the value is that string).
    pub path: String,
    /// Byte offsets into that string as this guardrail saw it.
    pub start: usize,
    pub end: usize,
    pub entity: String,
    /// The text found, for checks whose findings are not personal data (`injection`,
    /// `regex`, `deny_terms`; at most 200 characters). Never set for `pii`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub excerpt: Option<String>,
    /// What replaced it (`redact`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub placeholder: Option<String>,
}

/// One guardrail's verdict on a value (`guardrail_checked`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct GuardrailCheck {
    pub guardrail: String,
    pub outcome: CheckOutcome,
    pub effect: Effect,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[ts(optional, as = "Option<Vec<Finding>>")]
    pub findings: Vec<Finding>,
    /// A model's reason for its verdict, or the checker's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub reason: Option<String>,
    /// How long the check took.
    pub elapsed_ms: f64,
}

impl GuardrailCheck {
    /// What a person reads: the guardrail, and what it found or why it failed.
    pub fn summary(&self) -> String {
        let mut entities: Vec<&str> = Vec::new();
        for finding in &self.findings {
            if !entities.contains(&finding.entity.as_str()) {
                entities.push(&finding.entity);
            }
        }
        let mut text = format!("guardrail `{}`", self.guardrail);
        match self.outcome {
            CheckOutcome::Error => text.push_str(" could not check it"),
            _ if !entities.is_empty() => {
                text.push_str(&format!(" found {}", entities.join(", ")));
            }
            _ => {}
        }
        if let Some(reason) = &self.reason {
            text.push_str(&format!(": {reason}"));
        }
        text
    }
}

/// Where the checks of one value stand, for the session's decision.
pub fn disposition(checks: &[GuardrailCheck]) -> Effect {
    if checks.iter().any(|c| c.effect == Effect::Block) {
        Effect::Block
    } else if checks.iter().any(|c| c.effect == Effect::Approve) {
        Effect::Approve
    } else {
        Effect::Pass
    }
}

/// The strings of `value` with their JSON pointers, in document order.
fn strings(value: &Value, path: &mut String, out: &mut Vec<(String, String)>) {
    match value {
        Value::String(text) => out.push((path.clone(), text.clone())),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                strings(item, path, out);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                strings(item, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn excerpt(kind: GuardrailKind, text: &str, span: &Span) -> Option<String> {
    (kind != GuardrailKind::Pii).then(|| text[span.start..span.end].chars().take(200).collect())
}

/// Runs `guardrails` in order over `value`'s strings: a `redact` replaces its findings in
/// place (numbered through `placeholders`, shared by the session's results), a finding of a
/// `block` guardrail — or a checker error under `on_error = "block"` — stops the rest. Model
/// checks go through `judge`, charged to `principal`. One check per guardrail that ran.
pub async fn check_value(
    guardrails: &[Arc<Guardrail>],
    value: &mut Value,
    placeholders: &Mutex<Placeholders>,
    judge: Option<&dyn Judge>,
    principal: &str,
) -> Vec<GuardrailCheck> {
    let mut checks = Vec::new();
    for guardrail in guardrails {
        let started = Instant::now();
        let mut texts = Vec::new();
        strings(value, &mut String::new(), &mut texts);
        let mut findings = Vec::new();
        let mut spans_of = Vec::with_capacity(texts.len());
        for (path, text) in &texts {
            let spans = guardrail.check(text);
            findings.extend(spans.iter().map(|span| Finding {
                path: path.clone(),
                start: span.start,
                end: span.end,
                entity: span.entity.clone(),
                excerpt: excerpt(guardrail.kind, text, span),
                placeholder: None,
            }));
            spans_of.push(spans);
        }
        let mut reason = None;
        let mut failed = false;
        if let Some(spec) = &guardrail.judge {
            let whole = match &*value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            match ask(guardrail, spec, &whole, judge, principal).await {
                Ok(verdict) if verdict.pass => {}
                Ok(verdict) => {
                    findings.push(Finding {
                        path: String::new(),
                        start: 0,
                        end: whole.len(),
                        entity: match guardrail.kind {
                            GuardrailKind::Judge => "POLICY".into(),
                            _ => "INJECTION".into(),
                        },
                        excerpt: None,
                        placeholder: None,
                    });
                    reason = verdict.reason;
                }
                Err(JudgeError(error)) => {
                    failed = true;
                    reason = Some(error);
                }
            }
        }
        let (outcome, effect) = if failed {
            let effect = match guardrail.on_error {
                OnError::Block => Effect::Block,
                OnError::Allow => Effect::Pass,
            };
            (CheckOutcome::Error, effect)
        } else if findings.is_empty() {
            (CheckOutcome::Clean, Effect::Pass)
        } else {
            let effect = match guardrail.action {
                GuardrailAction::Redact => Effect::Redact,
                GuardrailAction::Block => Effect::Block,
                GuardrailAction::Flag => Effect::Flag,
                GuardrailAction::Approve => Effect::Approve,
            };
            (CheckOutcome::Found, effect)
        };
        if effect == Effect::Redact {
            redact(value, &texts, &spans_of, &mut findings, placeholders);
        }
        match (outcome, effect) {
            (CheckOutcome::Error, _) => {
                crate::metrics::count(&guardrail.name, crate::metrics::Place::ToolResult, "error")
            }
            (_, Effect::Pass) => {}
            (_, effect) => crate::metrics::count(
                &guardrail.name,
                crate::metrics::Place::ToolResult,
                effect.as_str(),
            ),
        }
        checks.push(GuardrailCheck {
            guardrail: guardrail.name.clone(),
            outcome,
            effect,
            findings,
            reason,
            elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
        });
        if effect == Effect::Block {
            break;
        }
    }
    checks
}

/// Asks the guardrail's model, under its deadline.
async fn ask(
    guardrail: &Guardrail,
    spec: &judge::JudgeSpec,
    text: &str,
    judge: Option<&dyn Judge>,
    principal: &str,
) -> Result<judge::JudgeVerdict, JudgeError> {
    let Some(judge) = judge else {
        return Err(JudgeError("no model router to ask".into()));
    };
    tokio::time::timeout(guardrail.timeout, judge::ask(spec, text, judge, principal))
        .await
        .unwrap_or_else(|_| Err(judge::late(guardrail, spec)))
}

/// Replaces each string's findings with placeholders, in place, and notes them.
fn redact(
    value: &mut Value,
    texts: &[(String, String)],
    spans_of: &[Vec<Span>],
    findings: &mut [Finding],
    placeholders: &Mutex<Placeholders>,
) {
    let mut placeholders = placeholders.lock().unwrap_or_else(|e| e.into_inner());
    let mut next = findings.iter_mut();
    for ((path, text), spans) in texts.iter().zip(spans_of) {
        if spans.is_empty() {
            continue;
        }
        for span in spans {
            if let Some(finding) = next.next() {
                finding.placeholder =
                    Some(placeholders.of(&span.entity, &text[span.start..span.end]));
            }
        }
        let redacted = placeholders.redact(text, spans, false);
        if let Some(slot) = value.pointer_mut(path) {
            *slot = Value::String(redacted);
        }
    }
}

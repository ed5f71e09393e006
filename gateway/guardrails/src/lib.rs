//! Guardrails (docs/guardrails.md): checks on the text that goes to a model and comes back,
//! configured as `[[guardrails]]` and attached to routes. This crate owns the checks — `pii`
//! (emails, phone numbers, Luhn-checked card numbers, IBANs, national ids, IP addresses and
//! secrets), the operator's `regex` patterns and `deny_terms` — and what a verdict does to a
//! text: `redact` replaces each finding with a typed placeholder (`[EMAIL_1]`, the same one for
//! the same value within a call), `block` refuses the text naming the guardrail, `flag` lets it
//! pass and records it. It does no I/O and knows no router: the router and the agent loop call
//! it, and what they journal or log is the redacted text.

mod config;
mod holdback;
mod injection;
pub mod judge;
pub mod metrics;
mod pii;
mod redact;
pub mod results;

use std::collections::HashMap;
use std::sync::Arc;

pub use config::{GuardrailAction, GuardrailConfig, GuardrailKind, OnError, DEFAULT_TIMEOUT_MS};
pub use holdback::{Holdback, MAX_HOLD, WINDOW};
pub use redact::Placeholders;

/// A finding: bytes `start..end` of a text are an `entity` (`EMAIL`, `CARD`, `SECRET`, the
/// operator's label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub entity: String,
}

/// Why a set of guardrails could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum GuardrailError {
    #[error("guardrail `{0}` is configured twice")]
    Duplicate(String),
    #[error("guardrail `{name}`: {problem}")]
    Invalid { name: String, problem: String },
}

enum Checker {
    Pii(pii::Pii),
    /// `(label, pattern)` pairs.
    Patterns(Vec<(String, regex::Regex)>),
    /// Only a model decides (`judge`).
    Model,
}

/// One configured check and what its findings do.
pub struct Guardrail {
    pub name: String,
    pub kind: GuardrailKind,
    pub action: GuardrailAction,
    /// Its placeholders in a tool call's arguments are turned back into their values before
    /// the tool runs (docs/guardrails.md, "Tools").
    pub restore_for_tools: bool,
    checker: Checker,
    /// The model a check asks (`judge`; `injection` with a `route`).
    pub judge: Option<judge::JudgeSpec>,
    /// The deadline of a model check.
    pub timeout: std::time::Duration,
    pub on_error: OnError,
}

impl Guardrail {
    /// The findings in `text`, in order, none overlapping (a longer finding wins).
    pub fn check(&self, text: &str) -> Vec<Span> {
        let mut spans = match &self.checker {
            Checker::Pii(pii) => pii.find(text),
            Checker::Patterns(patterns) => patterns
                .iter()
                .flat_map(|(label, re)| {
                    re.find_iter(text).map(|m| Span {
                        start: m.start(),
                        end: m.end(),
                        entity: label.clone(),
                    })
                })
                .collect(),
            Checker::Model => Vec::new(),
        };
        disjoint(&mut spans);
        spans
    }
}

/// Sorts the spans and drops each one that overlaps an earlier (or, at the same start, a
/// longer) one.
fn disjoint(spans: &mut Vec<Span>) {
    spans.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    let mut end = 0;
    spans.retain(|s| {
        let keep = s.start >= end && s.end > s.start;
        if keep {
            end = s.end;
        }
        keep
    });
}

/// Every configured guardrail, by name.
#[derive(Default)]
pub struct Guardrails {
    by_name: HashMap<String, Arc<Guardrail>>,
}

impl Guardrails {
    pub fn build(configs: &[GuardrailConfig]) -> Result<Self, GuardrailError> {
        let mut by_name = HashMap::new();
        for config in configs {
            let guardrail = Arc::new(config.build()?);
            if by_name.insert(config.name.clone(), guardrail).is_some() {
                return Err(GuardrailError::Duplicate(config.name.clone()));
            }
        }
        Ok(Guardrails { by_name })
    }

    pub fn get(&self, name: &str) -> Option<Arc<Guardrail>> {
        self.by_name.get(name).cloned()
    }
}

/// What one guardrail found in a call's texts, and what it did.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub guardrail: String,
    pub action: GuardrailAction,
    /// Findings by entity, in order of first appearance: `(entity, count)`.
    pub found: Vec<(String, usize)>,
}

impl Verdict {
    /// Adds what the same guardrail found in a later piece of the text.
    pub fn merge(&mut self, later: Verdict) {
        for (entity, n) in later.found {
            match self.found.iter_mut().find(|(e, _)| *e == entity) {
                Some((_, count)) => *count += n,
                None => self.found.push((entity, n)),
            }
        }
    }
}

/// A text a `block` guardrail refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Blocked {
    pub guardrail: String,
    /// What it found (entities only: never the text).
    pub entities: Vec<String>,
}

/// Runs `guardrails` in order over `texts` (a call's messages, say): each `redact` replaces
/// its findings in place through `placeholders`, a `block` with findings stops everything,
/// a `flag` records. The verdicts of guardrails that found something, in order.
pub fn apply(
    guardrails: &[Arc<Guardrail>],
    texts: &mut [String],
    placeholders: &mut Placeholders,
) -> Result<Vec<Verdict>, Blocked> {
    let mut verdicts = Vec::new();
    for guardrail in guardrails {
        let mut found: Vec<(String, usize)> = Vec::new();
        let mut spans_of = Vec::with_capacity(texts.len());
        for text in texts.iter() {
            let spans = guardrail.check(text);
            for span in &spans {
                match found.iter_mut().find(|(e, _)| *e == span.entity) {
                    Some((_, n)) => *n += 1,
                    None => found.push((span.entity.clone(), 1)),
                }
            }
            spans_of.push(spans);
        }
        if found.is_empty() {
            continue;
        }
        match guardrail.action {
            GuardrailAction::Block => {
                return Err(Blocked {
                    guardrail: guardrail.name.clone(),
                    entities: found.into_iter().map(|(e, _)| e).collect(),
                })
            }
            GuardrailAction::Redact => {
                for (text, spans) in texts.iter_mut().zip(&spans_of) {
                    if !spans.is_empty() {
                        *text = placeholders.redact(text, spans, guardrail.restore_for_tools);
                    }
                }
            }
            // `approve` holds a tool result for a person (`results.rs`); routes refuse it.
            GuardrailAction::Flag | GuardrailAction::Approve => {}
        }
        verdicts.push(Verdict {
            guardrail: guardrail.name.clone(),
            action: guardrail.action,
            found,
        });
    }
    Ok(verdicts)
}

#[cfg(test)]
mod result_tests;
#[cfg(test)]
mod tests;

//! `[[guardrails]]` (docs/configuration.md): a name, a kind, an action and the kind's own
//! settings; attached to routes by name (`[[routes]] guardrails = [...]`).

use serde::{Deserialize, Serialize};

use crate::{Checker, Guardrail, GuardrailError};

/// What a guardrail checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardrailKind {
    /// Personal data and secrets, by pattern (`entities` narrows which).
    Pii,
    /// The operator's regular expressions (`patterns`, each its own label).
    Regex,
    /// The operator's words and phrases (`terms`), whole words, any case.
    DenyTerms,
    /// Instructions hidden in text: overrides of earlier instructions, role-play jailbreaks,
    /// forged system turns, exfiltration links, invisible characters — by pattern, and also
    /// asked of a model when `route` is set.
    Injection,
    /// A model (`route`) asked whether the text meets `rubric`, its verdict parsed strictly.
    Judge,
}

/// What a finding does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardrailAction {
    /// Replaces each finding with a typed placeholder (`[EMAIL_1]`).
    Redact,
    /// Refuses the text, naming the guardrail.
    Block,
    /// Lets the text pass and records the finding.
    Flag,
    /// Holds the text (a tool result) for a person: the session parks until they approve
    /// (the model sees it) or reject it (the call fails). Agents' guardrails only.
    Approve,
}

/// What a checker that fails or misses its deadline does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Blocks the text, as a finding of a `block` guardrail would (fail-closed; the default).
    #[default]
    Block,
    /// Lets the text pass and records the error.
    Allow,
}

impl GuardrailAction {
    pub fn as_str(self) -> &'static str {
        match self {
            GuardrailAction::Redact => "redact",
            GuardrailAction::Block => "block",
            GuardrailAction::Flag => "flag",
            GuardrailAction::Approve => "approve",
        }
    }
}

/// One `[[guardrails]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardrailConfig {
    pub name: String,
    pub kind: GuardrailKind,
    pub action: GuardrailAction,
    /// `pii`: only these entities (`EMAIL`, `PHONE`, `CARD`, `IBAN`, `SSN`, `NINO`, `IP`,
    /// `SECRET`); all of them when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entities: Option<Vec<String>>,
    /// `regex`: label → pattern (Rust `regex` syntax; the label becomes the placeholder's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<Pattern>,
    /// `deny_terms`: the words and phrases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub terms: Vec<String>,
    /// `redact`: a tool call the model writes with one of its placeholders gets the value
    /// back, so a redacted address can still be written to (docs/guardrails.md, "Tools").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restore_for_tools: bool,
    /// `judge` (required) and `injection` (optional): the route the text is asked of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// `judge`: the policy the text must meet, in plain words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rubric: Option<String>,
    /// The checker's deadline (milliseconds): one that asks a model and has no verdict by then
    /// has failed.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// What a failed or late checker does: `block` (default) or `allow`.
    #[serde(default)]
    pub on_error: OnError,
}

/// The default deadline of a checker that asks a model.
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

/// A labelled pattern of a `regex` guardrail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pattern {
    pub label: String,
    pub pattern: String,
}

/// A label a placeholder can carry: 1–32 capital letters, digits and `_`.
fn valid_label(label: &str) -> bool {
    (1..=32).contains(&label.len())
        && label
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

impl GuardrailConfig {
    /// A guardrail of `kind` doing `action`, every other setting at its default (no entities
    /// narrowed, no patterns or terms, no route; the default deadline, failing closed).
    pub fn new(name: &str, kind: GuardrailKind, action: GuardrailAction) -> Self {
        GuardrailConfig {
            name: name.to_string(),
            kind,
            action,
            entities: None,
            patterns: Vec::new(),
            terms: Vec::new(),
            restore_for_tools: false,
            route: None,
            rubric: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            on_error: OnError::Block,
        }
    }

    pub(crate) fn build(&self) -> Result<Guardrail, GuardrailError> {
        let invalid = |problem: String| GuardrailError::Invalid {
            name: self.name.clone(),
            problem,
        };
        let checker = match self.kind {
            GuardrailKind::Pii => {
                let pii = crate::pii::Pii::new(self.entities.as_deref()).map_err(invalid)?;
                Checker::Pii(pii)
            }
            GuardrailKind::Regex => {
                if self.patterns.is_empty() {
                    return Err(invalid("a `regex` guardrail needs `patterns`".into()));
                }
                let mut compiled = Vec::new();
                for p in &self.patterns {
                    if !valid_label(&p.label) {
                        return Err(invalid(format!(
                            "label `{}` is not 1 to 32 capital letters, digits and `_`",
                            p.label
                        )));
                    }
                    let re = regex::Regex::new(&p.pattern)
                        .map_err(|e| invalid(format!("pattern `{}`: {e}", p.label)))?;
                    compiled.push((p.label.clone(), re));
                }
                Checker::Patterns(compiled)
            }
            GuardrailKind::DenyTerms => {
                let terms: Vec<String> = self
                    .terms
                    .iter()
                    .map(|t| t.trim())
                    .filter(|t| !t.is_empty())
                    .map(regex::escape)
                    .collect();
                if terms.is_empty() {
                    return Err(invalid("a `deny_terms` guardrail needs `terms`".into()));
                }
                let re = regex::RegexBuilder::new(&format!(r"\b(?:{})\b", terms.join("|")))
                    .case_insensitive(true)
                    .build()
                    .map_err(|e| invalid(e.to_string()))?;
                Checker::Patterns(vec![("TERM".into(), re)])
            }
            GuardrailKind::Injection => {
                if self.route.is_some() && self.action == GuardrailAction::Redact {
                    return Err(invalid(
                        "an `injection` guardrail with a `route` judges a whole text: its \
                         action is `block`, `flag` or `approve`, not `redact`"
                            .into(),
                    ));
                }
                Checker::Patterns(crate::injection::patterns())
            }
            GuardrailKind::Judge => {
                let rubric = self.rubric.as_deref().map(str::trim).unwrap_or_default();
                if rubric.is_empty() {
                    return Err(invalid("a `judge` guardrail needs a `rubric`".into()));
                }
                if self.route.is_none() {
                    return Err(invalid("a `judge` guardrail needs a `route`".into()));
                }
                if self.action == GuardrailAction::Redact {
                    return Err(invalid(
                        "a `judge` guardrail judges a whole text: its action is `block`, `flag` \
                         or `approve`, not `redact`"
                            .into(),
                    ));
                }
                Checker::Model
            }
        };
        if self.route.is_some()
            && !matches!(self.kind, GuardrailKind::Judge | GuardrailKind::Injection)
        {
            return Err(invalid(
                "`route` is for `judge` and `injection` guardrails".into(),
            ));
        }
        if self.rubric.is_some() && self.kind != GuardrailKind::Judge {
            return Err(invalid("`rubric` is for `judge` guardrails".into()));
        }
        if self.route.as_deref().is_some_and(|r| r.trim().is_empty()) {
            return Err(invalid("`route` is empty".into()));
        }
        if self.timeout_ms == 0 {
            return Err(invalid("`timeout_ms` must be at least 1".into()));
        }
        if self.restore_for_tools && self.action != GuardrailAction::Redact {
            return Err(invalid(
                "`restore_for_tools` needs `action = \"redact\"`".into(),
            ));
        }
        Ok(Guardrail {
            name: self.name.clone(),
            kind: self.kind,
            action: self.action,
            restore_for_tools: self.restore_for_tools,
            checker,
            judge: self.route.clone().map(|route| crate::judge::JudgeSpec {
                route,
                rubric: match self.kind {
                    GuardrailKind::Judge => self.rubric.clone().unwrap_or_default(),
                    _ => crate::judge::INJECTION_RUBRIC.to_string(),
                },
            }),
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            on_error: self.on_error,
        })
    }
}

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
}

impl GuardrailAction {
    pub fn as_str(self) -> &'static str {
        match self {
            GuardrailAction::Redact => "redact",
            GuardrailAction::Block => "block",
            GuardrailAction::Flag => "flag",
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
        };
        if self.restore_for_tools && self.action != GuardrailAction::Redact {
            return Err(invalid(
                "`restore_for_tools` needs `action = \"redact\"`".into(),
            ));
        }
        Ok(Guardrail {
            name: self.name.clone(),
            action: self.action,
            restore_for_tools: self.restore_for_tools,
            checker,
        })
    }
}

//! Typed placeholders: each finding becomes `[{ENTITY}_{n}]`, numbered per entity in the order
//! values first appear, the same value always the same placeholder. A call's texts are redacted
//! through one [`Placeholders`], so a value repeated across its messages reads the same
//! everywhere — and since a session sends its whole history again each turn, in the same order,
//! the numbering is the same turn after turn.

use std::collections::HashMap;

use crate::Span;

/// The placeholders given so far: value → placeholder, and how many each entity has.
#[derive(Debug, Default, Clone)]
pub struct Placeholders {
    given: HashMap<String, String>,
    counts: HashMap<String, usize>,
    /// Placeholders a tool call may have turned back into their values (their guardrail sets
    /// `restore_for_tools`): placeholder → value.
    restorable: HashMap<String, String>,
}

impl Placeholders {
    /// Placeholders numbered on from `counts` (`(entity, highest number given)`), so a new
    /// value never takes a number another value had.
    pub fn continuing(counts: impl IntoIterator<Item = (String, usize)>) -> Self {
        Placeholders {
            counts: counts.into_iter().collect(),
            ..Default::default()
        }
    }

    /// The entity and number of a placeholder (`[EMAIL_3]` → `("EMAIL", 3)`).
    pub fn parse(placeholder: &str) -> Option<(&str, usize)> {
        let inner = placeholder.strip_prefix('[')?.strip_suffix(']')?;
        let (entity, n) = inner.rsplit_once('_')?;
        Some((entity, n.parse().ok()?))
    }

    /// The placeholder of `value` as an `entity` (a new one the first time).
    pub fn of(&mut self, entity: &str, value: &str) -> String {
        if let Some(given) = self.given.get(value) {
            return given.clone();
        }
        let n = self.counts.entry(entity.to_string()).or_insert(0);
        *n += 1;
        let placeholder = format!("[{entity}_{n}]");
        self.given.insert(value.to_string(), placeholder.clone());
        placeholder
    }

    /// `text` with each of `spans` (sorted, disjoint) replaced by its placeholder;
    /// `restorable`: a tool call may turn them back ([`Placeholders::restore`]).
    pub fn redact(&mut self, text: &str, spans: &[Span], restorable: bool) -> String {
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for span in spans {
            let value = &text[span.start..span.end];
            let placeholder = self.of(&span.entity, value);
            if restorable {
                self.restorable
                    .insert(placeholder.clone(), value.to_string());
            }
            out.push_str(&text[at..span.start]);
            out.push_str(&placeholder);
            at = span.end;
        }
        out.push_str(&text[at..]);
        out
    }

    /// `text` with each restorable placeholder in it replaced by the value it stands for (the
    /// others stay placeholders).
    pub fn restore(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (placeholder, value) in &self.restorable {
            if out.contains(placeholder.as_str()) {
                out = out.replace(placeholder.as_str(), value);
            }
        }
        out
    }

    /// Whether any placeholder may be restored.
    pub fn any_restorable(&self) -> bool {
        !self.restorable.is_empty()
    }
}

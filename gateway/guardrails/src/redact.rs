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
}

impl Placeholders {
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

    /// `text` with each of `spans` (sorted, disjoint) replaced by its placeholder.
    pub fn redact(&mut self, text: &str, spans: &[Span]) -> String {
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for span in spans {
            out.push_str(&text[at..span.start]);
            out.push_str(&self.of(&span.entity, &text[span.start..span.end]));
            at = span.end;
        }
        out.push_str(&text[at..]);
        out
    }
}

//! Guardrails over a text that arrives in pieces (a streamed answer): a piece is released only
//! once nothing that follows can make it part of a finding, so a redaction never reaches a
//! client after the value it hides. What is held back: the last [`WINDOW`] bytes (findings
//! with spaces inside — phone, card and IBAN numbers — are shorter), the trailing run of
//! characters without white space (a token being written), and everything from an opened
//! private-key block; never more than [`MAX_HOLD`] bytes (past it the held text is released,
//! redacted as it stands). A finding that spans the cut moves the cut before it. With a
//! `judge` guardrail among them the whole text is held: a model's verdict is about all of it,
//! so nothing is released before [`Holdback::finish`] and the caller asks the model.
//!
//! The released pieces, joined, are the text: a caller that keeps them (the router does) holds
//! in its answer, its journal and its log exactly what the client was sent.

use std::sync::Arc;

use crate::{Blocked, Guardrail, GuardrailAction, GuardrailKind, Placeholders, Verdict};

/// Bytes always held back at the end.
pub const WINDOW: usize = 64;
/// The most held back at once.
pub const MAX_HOLD: usize = 16 * 1024;

/// A streamed text going through guardrails.
pub struct Holdback {
    guardrails: Vec<Arc<Guardrail>>,
    placeholders: Placeholders,
    pending: String,
    released: String,
    verdicts: Vec<Verdict>,
    blocked: Option<Blocked>,
    /// A `judge` guardrail is among them: nothing is released before the end.
    whole: bool,
}

impl Holdback {
    /// `placeholders`: those the call's request was given, so an answer that repeats a value
    /// shows the request's placeholder for it.
    pub fn new(guardrails: Vec<Arc<Guardrail>>, placeholders: Placeholders) -> Self {
        Holdback {
            whole: guardrails.iter().any(|g| g.kind == GuardrailKind::Judge),
            guardrails,
            placeholders,
            pending: String::new(),
            released: String::new(),
            verdicts: Vec::new(),
            blocked: None,
        }
    }

    /// Takes the next piece; what may be released now (redacted), if anything. Nothing more is
    /// released once a `block` guardrail found something.
    pub fn push(&mut self, piece: &str) -> Option<String> {
        if self.blocked.is_some() {
            return None;
        }
        self.pending.push_str(piece);
        let cut = self.cut();
        if cut == 0 {
            return None;
        }
        let head: String = self.pending.drain(..cut).collect();
        self.release(head)
    }

    /// The end of the text: the rest, redacted (`None` when blocked).
    pub fn finish(&mut self) -> Option<String> {
        if self.blocked.is_some() {
            return None;
        }
        let rest = std::mem::take(&mut self.pending);
        self.release(rest)
    }

    /// Whether the whole text is held until its end (a `judge` guardrail is among them).
    pub fn holds_whole(&self) -> bool {
        self.whole
    }

    /// Everything released, joined: the text as its reader was sent it.
    pub fn released(&self) -> &str {
        &self.released
    }

    /// What the guardrails found in what was released: one verdict per guardrail.
    pub fn verdicts(&self) -> &[Verdict] {
        &self.verdicts
    }

    /// The `block` guardrail that stopped the text, if one did.
    pub fn blocked(&self) -> Option<&Blocked> {
        self.blocked.as_ref()
    }

    fn release(&mut self, text: String) -> Option<String> {
        if text.is_empty() {
            return Some(text);
        }
        let mut texts = [text];
        match crate::apply(&self.guardrails, &mut texts, &mut self.placeholders) {
            Ok(verdicts) => {
                // One verdict per guardrail for the whole text, whatever the pieces.
                for verdict in verdicts {
                    match self
                        .verdicts
                        .iter_mut()
                        .find(|v| v.guardrail == verdict.guardrail)
                    {
                        Some(seen) => seen.merge(verdict),
                        None => self.verdicts.push(verdict),
                    }
                }
                let [out] = texts;
                self.released.push_str(&out);
                Some(out)
            }
            Err(blocked) => {
                self.blocked = Some(blocked);
                None
            }
        }
    }

    /// Where the pending text may be cut: nothing after it can change what is before it.
    fn cut(&self) -> usize {
        if self.whole {
            return 0;
        }
        let text = &self.pending;
        let mut cut = text.len().saturating_sub(WINDOW);
        // A token being written (no white space since).
        let run_start = text
            .char_indices()
            .rev()
            .find(|(_, c)| c.is_whitespace())
            .map_or(0, |(i, c)| i + c.len_utf8());
        cut = cut.min(run_start);
        // An opened private-key block, until its end line.
        if let Some(open) = text.rfind("-----BEGIN") {
            let after = &text[open..];
            let closed = after
                .find("-----END")
                .is_some_and(|end| after[end..].contains("KEY-----"));
            if !closed {
                cut = cut.min(open);
            }
        }
        // A finding across the cut moves it before the finding.
        for guardrail in &self.guardrails {
            if guardrail.action == GuardrailAction::Flag {
                continue;
            }
            for span in guardrail.check(text) {
                if span.start < cut && cut < span.end {
                    cut = span.start;
                }
            }
        }
        if text.len() - cut > MAX_HOLD {
            cut = text.len() - MAX_HOLD;
        }
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        cut
    }
}

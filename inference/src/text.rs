//! Turning a growing token sequence into clean text deltas: incremental UTF-8 detokenization
//! (a byte-level BPE token can end in the middle of a character) and stop sequences (text that
//! could still become a stop sequence is held back until it is decided).

use tokenizers::Tokenizer;

/// Decodes tokens one at a time, emitting only complete characters.
///
/// It re-decodes a short window (`prefix..`) and emits what the new token added, because
/// decoding tokens one by one and concatenating is wrong for byte-level BPE and for
/// tokenizers that strip leading spaces. A window that ends in U+FFFD is an incomplete
/// character: nothing is emitted until a later token completes it.
pub struct IncrementalDecoder {
    tokens: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
}

impl IncrementalDecoder {
    pub fn new() -> Self {
        IncrementalDecoder {
            tokens: Vec::new(),
            prefix_offset: 0,
            read_offset: 0,
        }
    }

    /// The window decoded without and with the tokens not yet emitted.
    fn window(&self, tokenizer: &Tokenizer) -> (String, String) {
        let decode = |ids: &[u32]| tokenizer.decode(ids, true).unwrap_or_default();
        (
            decode(&self.tokens[self.prefix_offset..self.read_offset]),
            decode(&self.tokens[self.prefix_offset..]),
        )
    }

    /// Adds one token; returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, token: u32) -> String {
        self.tokens.push(token);
        let (prefix, full) = self.window(tokenizer);
        if full.len() > prefix.len()
            && !full.ends_with('\u{FFFD}')
            && full.is_char_boundary(prefix.len())
        {
            let delta = full[prefix.len()..].to_string();
            self.prefix_offset = self.read_offset;
            self.read_offset = self.tokens.len();
            delta
        } else {
            String::new()
        }
    }

    /// Text still pending at the end (an incomplete character is emitted as U+FFFD).
    pub fn finish(&mut self, tokenizer: &Tokenizer) -> String {
        let (prefix, full) = self.window(tokenizer);
        self.prefix_offset = self.tokens.len();
        self.read_offset = self.tokens.len();
        if full.len() > prefix.len() && full.is_char_boundary(prefix.len()) {
            full[prefix.len()..].to_string()
        } else {
            String::new()
        }
    }
}

impl Default for IncrementalDecoder {
    fn default() -> Self {
        Self::new()
    }
}

/// What feeding text to a [`StopFilter`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filtered {
    /// Text that is safe to emit now.
    pub emit: String,
    /// The stop sequence that was found (generation ends; `emit` is the last text).
    pub stopped: Option<String>,
}

/// Cuts the answer at the first stop sequence, holding back any tail that might be the start
/// of one, so that a streamed answer never shows part of a stop sequence.
pub struct StopFilter {
    stops: Vec<String>,
    pending: String,
}

impl StopFilter {
    pub fn new(stops: &[String]) -> Self {
        StopFilter {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> Filtered {
        self.pending.push_str(text);
        if self.stops.is_empty() {
            return Filtered {
                emit: std::mem::take(&mut self.pending),
                stopped: None,
            };
        }
        let first_stop = self
            .stops
            .iter()
            .filter_map(|stop| self.pending.find(stop.as_str()).map(|at| (at, stop)))
            .min_by_key(|(at, _)| *at);
        if let Some((at, stop)) = first_stop {
            let emit = self.pending[..at].to_string();
            let stop = stop.clone();
            self.pending.clear();
            return Filtered {
                emit,
                stopped: Some(stop),
            };
        }
        // Hold back the longest tail that is a prefix of some stop sequence.
        let hold = self
            .stops
            .iter()
            .map(|stop| longest_suffix_prefix(&self.pending, stop))
            .max()
            .unwrap_or(0);
        let cut = self.pending.len() - hold;
        let emit = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        Filtered {
            emit,
            stopped: None,
        }
    }

    /// The held-back text, at the end of generation (it turned out not to be a stop).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// Length in bytes of the longest suffix of `text` that is a proper prefix of `stop`.
fn longest_suffix_prefix(text: &str, stop: &str) -> usize {
    let max = (stop.len() - 1).min(text.len());
    (1..=max)
        .rev()
        .find(|&n| {
            let start = text.len() - n;
            text.is_char_boundary(start) && stop.starts_with(&text[start..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool, Vec<String>) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut filter = StopFilter::new(&stops);
        let mut out = String::new();
        let mut deltas = Vec::new();
        for piece in pieces {
            let f = filter.push(piece);
            deltas.push(f.emit.clone());
            out.push_str(&f.emit);
            if f.stopped.is_some() {
                return (out, true, deltas);
            }
        }
        out.push_str(&filter.finish());
        (out, false, deltas)
    }

    #[test]
    fn stops_hold_back_partial_matches() {
        let (out, stopped, deltas) = run(&["</end>"], &["Hello <", "/en", "d> more"]);
        assert_eq!(out, "Hello ");
        assert!(stopped);
        assert_eq!(deltas, vec!["Hello ", "", ""]);
    }

    #[test]
    fn false_alarms_are_released() {
        let (out, stopped, _) = run(&["</end>"], &["a <", "/e", "x> b"]);
        assert_eq!(out, "a </ex> b");
        assert!(!stopped);
    }

    #[test]
    fn earliest_stop_wins_and_unicode_is_safe() {
        let (out, stopped, _) = run(&["ÿz", "STOP"], &["héllo wörld ÿ", "STOPÿz"]);
        assert_eq!(out, "héllo wörld ÿ");
        assert!(stopped);
    }
}

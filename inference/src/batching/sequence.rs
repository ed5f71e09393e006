//! One row of a worker's running batch: its sampler, detokenizer, stop filter and tool-call
//! grammar, one decode step at a time.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Instant;

use llguidance::Matcher;
use serde_json::Value;

use crate::constrained::mask_logits;
use crate::sampling::Sampler;
use crate::template::TOOL_CALL_OPEN;
use crate::text::{IncrementalDecoder, StopFilter};
use crate::{Completion, Error, FinishReason, Result, StreamEvent, Timings, ToolCall, Usage};

use super::*;

/// One row of the running batch.
pub(super) struct Sequence {
    pub(super) job: Job,
    pub(super) sampler: Sampler,
    pub(super) decoder: IncrementalDecoder,
    pub(super) stops: StopFilter,
    /// Set while writing a tool call.
    pub(super) matcher: Option<Matcher>,
    pub(super) call_text: String,
    /// Auto mode, at the start of the reply: text held back while it may still be the start of
    /// a bare JSON call (`{"name"…`, fenced or not). `None` once the reply is known to be text.
    pub(super) leading: Option<String>,
    /// Tokens fed to the model before sampling resumes (the call opener after a bare call was
    /// recognised), next first.
    pub(super) forced: VecDeque<u32>,
    /// Positions of this row in the KV cache when its reply began.
    reply_start: usize,
    /// The logits of the reply's first token, while the start of the reply is held back.
    first_logits: Option<Vec<f32>>,
    /// Set when a reply that began as JSON for no tool is decoded again as text.
    text_only: bool,
    pub(super) text: String,
    pub(super) generated: usize,
    pub(super) last_token: u32,
    /// Positions of this row in the KV cache.
    pub(super) valid_len: usize,
    /// Prompt tokens taken from the prefix cache instead of prefilled.
    pub(super) cached_prompt_tokens: usize,
    pub(super) first_token_at: Option<Instant>,
    pub(super) last_token_at: Option<Instant>,
    pub(super) done: bool,
}

impl Sequence {
    pub(super) fn new(
        job: Job,
        shared: &ModelShared,
        grammar_budget: usize,
    ) -> std::result::Result<Self, (Box<Job>, Error)> {
        let mut stops = job.sampling.stop.clone();
        let auto = matches!(job.tools, ToolMode::Auto { .. });
        if auto {
            stops.push(TOOL_CALL_OPEN.to_string());
        }
        let matcher = match &job.tools {
            ToolMode::Forced { schema } => {
                match shared.grammar.matcher(schema.clone(), grammar_budget, "*") {
                    Ok(matcher) => Some(matcher),
                    Err(error) => return Err((Box::new(job), error)),
                }
            }
            _ => None,
        };
        let sampler = match Sampler::new(&job.sampling) {
            Ok(sampler) => sampler,
            Err(error) => return Err((Box::new(job), error)),
        };
        Ok(Sequence {
            sampler,
            decoder: IncrementalDecoder::new(),
            stops: StopFilter::new(&stops),
            matcher,
            call_text: String::new(),
            leading: auto.then(String::new),
            forced: VecDeque::new(),
            reply_start: job.prompt.len(),
            first_logits: None,
            text_only: false,
            text: String::new(),
            generated: 0,
            last_token: 0,
            valid_len: job.prompt.len(),
            cached_prompt_tokens: 0,
            first_token_at: None,
            last_token_at: None,
            done: false,
            job,
        })
    }

    /// Cache positions this row may still need: what it holds, its remaining token budget,
    /// and the position of the token being decoded.
    pub(super) fn room_needed(&self) -> usize {
        self.valid_len
            .saturating_add(self.job.sampling.max_tokens.saturating_sub(self.generated))
            .saturating_add(1)
    }

    pub(super) fn emit(&mut self, delta: String) {
        if !delta.is_empty() {
            self.text.push_str(&delta);
            let _ = self.job.events.send(StreamEvent::Delta(delta));
        }
    }

    /// Picks the next token from this row's logits and acts on it. The logits are the
    /// caller's scratch: masks and bans are applied to them in place (no per-token copy of a
    /// vocabulary-wide row).
    pub(super) fn step(&mut self, logits: &mut [f32], shared: &ModelShared) -> Result<()> {
        if self.job.abandoned() {
            return self.finish(FinishReason::Cancelled, shared);
        }
        if let Some(token) = self.forced.pop_front() {
            // The logits are those of a token the reply no longer holds: feed the opener on.
            self.last_token = token;
            self.generated += 1;
            self.job.progress.store(self.generated, Ordering::Relaxed);
            if self.generated >= self.job.sampling.max_tokens {
                return self.finish(FinishReason::Length, shared);
            }
            return Ok(());
        }
        let token = match &mut self.matcher {
            Some(matcher) => {
                mask_logits(matcher, logits)?;
                self.sampler.sample(logits)
            }
            None => {
                if self.generated == 0 && (self.leading.is_some() || self.guards_repeats()) {
                    // Kept in case the reply turns out to be JSON for a tool that does not
                    // exist, or a repeat of the call just answered: it is then decoded again
                    // from here, as text.
                    self.first_logits = Some(logits.to_vec());
                }
                let ban_eos = self.job.sampling.ignore_eos;
                let ban_openers = self.text_only && self.text.trim().is_empty();
                if ban_eos || ban_openers {
                    self.ban(logits, shared, ban_eos, ban_openers);
                }
                self.sampler.sample(logits)
            }
        };
        let now = Instant::now();
        self.first_token_at.get_or_insert(now);
        self.last_token_at = Some(now);
        self.generated += 1;
        self.job.progress.store(self.generated, Ordering::Relaxed);
        self.accept(token, shared)
    }

    /// Sets the logits of end-of-sequence tokens and/or of tokens that open a JSON object, a
    /// code fence or (when it is one token) a tagged call to −∞.
    fn ban(&self, logits: &mut [f32], shared: &ModelShared, eos: bool, openers: bool) {
        let one_token_opener = match shared.call_opener.as_slice() {
            [opener] => std::slice::from_ref(opener),
            _ => &[],
        };
        let banned = eos
            .then_some(shared.eos_ids.as_slice())
            .into_iter()
            .chain(openers.then_some(shared.json_openers.as_slice()))
            .chain(openers.then_some(one_token_opener))
            .flatten();
        for &token in banned {
            if let Some(logit) = logits.get_mut(token as usize) {
                *logit = f32::NEG_INFINITY;
            }
        }
    }

    /// Acts on the token just chosen for this row.
    fn accept(&mut self, token: u32, shared: &ModelShared) -> Result<()> {
        self.last_token = token;
        if let Some(matcher) = &mut self.matcher {
            let eos = shared.eos_ids.contains(&token);
            if !eos {
                matcher
                    .consume_token(token)
                    .map_err(|e| Error::Inference(format!("tool-call grammar: {e}")))?;
                let piece = self.decoder.push(&shared.tokenizer, token);
                self.call_text.push_str(&piece);
            }
            if eos || matcher.is_stopped() {
                let rest = self.decoder.finish(&shared.tokenizer);
                self.call_text.push_str(&rest);
                if self.repeats_an_answered_call() {
                    self.matcher = None;
                    self.call_text.clear();
                    return self.answer_in_text(shared);
                }
                return self.finish(FinishReason::ToolCalls, shared);
            }
        } else if shared.eos_ids.contains(&token) {
            return self.finish(FinishReason::Stop, shared);
        } else {
            let mut piece = self.decoder.push(&shared.tokenizer, token);
            if let Some(held) = &mut self.leading {
                held.push_str(&piece);
                let ToolMode::Auto { names, .. } = &self.job.tools else {
                    unreachable!("the start of a reply is held back only in auto mode")
                };
                match leading_call(held, names) {
                    Lead::Undecided => piece.clear(),
                    Lead::Call => {
                        self.start_bare_call(shared)?;
                        return self.check_budget(shared);
                    }
                    Lead::NotATool => return self.answer_in_text(shared),
                    Lead::Text => {
                        self.first_logits = None;
                        piece = self.leading.take().unwrap_or_default();
                    }
                }
            }
            let filtered = self.stops.push(&piece);
            self.emit(filtered.emit);
            match filtered.stopped {
                // A reply decoded again as text ends where it would open a call.
                Some(stop) if stop == TOOL_CALL_OPEN && self.text_only => {
                    return self.finish(FinishReason::Stop, shared)
                }
                // Text the opener's last token carried after `<tool_call>` is dropped: the
                // grammar starts on the next token.
                Some(stop) if stop == TOOL_CALL_OPEN => self.open_call(shared)?,
                Some(_) => return self.finish(FinishReason::Stop, shared),
                None => {}
            }
        }
        self.check_budget(shared)
    }

    /// Starts decoding an auto-mode call under the grammar, from the next token, within what
    /// is left of the token budget.
    fn open_call(&mut self, shared: &ModelShared) -> Result<()> {
        let ToolMode::Auto { schema, .. } = &self.job.tools else {
            unreachable!("calls are opened by the model only in auto mode")
        };
        let budget = self.job.sampling.max_tokens.saturating_sub(self.generated);
        let matcher = shared.grammar.matcher(schema.clone(), budget, "*")?;
        self.matcher = Some(matcher);
        self.decoder = IncrementalDecoder::new();
        Ok(())
    }

    fn guards_repeats(&self) -> bool {
        matches!(&self.job.tools, ToolMode::Auto { answered, .. } if !answered.is_empty())
    }

    /// Whether the call just decoded names a tool whose call was just answered, with every
    /// argument of that call unchanged (added optional arguments do not make it new).
    fn repeats_an_answered_call(&self) -> bool {
        let ToolMode::Auto { answered, .. } = &self.job.tools else {
            return false;
        };
        let Ok(call) = serde_json::from_str::<Value>(self.call_text.trim()) else {
            return false;
        };
        answered.iter().any(|(name, before)| {
            call["name"].as_str() == Some(name.as_str())
                && match (before.as_object(), call["arguments"].as_object()) {
                    (Some(before), Some(now)) => before.iter().all(|(k, v)| now.get(k) == Some(v)),
                    _ => before == &call["arguments"],
                }
        })
    }

    fn check_budget(&mut self, shared: &ModelShared) -> Result<()> {
        if self.generated >= self.job.sampling.max_tokens {
            return self.finish(FinishReason::Length, shared);
        }
        Ok(())
    }

    /// The reply began as a JSON object named after no tool (the model meant to answer in JSON,
    /// not to call), or was a call that only repeats one just answered. The row's cache goes
    /// back to where the reply began and the first token is chosen again from the logits kept
    /// then, with JSON and fence openers (and a one-token call opener) banned until the reply
    /// holds some text; should it open a call later, it ends there.
    fn answer_in_text(&mut self, shared: &ModelShared) -> Result<()> {
        self.leading = None;
        self.text_only = true;
        self.decoder = IncrementalDecoder::new();
        self.valid_len = self.reply_start;
        let Some(mut logits) = self.first_logits.take() else {
            return Err(Error::Inference(
                "the reply's first logits were not kept".into(),
            ));
        };
        self.ban(&mut logits, shared, self.job.sampling.ignore_eos, true);
        let token = self.sampler.sample(&logits);
        self.accept(token, shared)
    }

    /// The reply so far is the start of a call written as bare JSON (how Qwen models often
    /// write them, although their template asks for `<tool_call>` tags). The row's cache goes
    /// back to where the reply began, the opener is fed instead, and the call is then decoded
    /// under the grammar like any tagged one: the model continues the canonical form, and the
    /// held-back text never reaches the caller.
    fn start_bare_call(&mut self, shared: &ModelShared) -> Result<()> {
        self.open_call(shared)?;
        self.leading = None;
        self.valid_len = self.reply_start;
        if !self.guards_repeats() {
            self.first_logits = None;
        }
        self.forced = shared.call_opener.iter().copied().collect();
        let Some(first) = self.forced.pop_front() else {
            return Err(Error::Inference(
                "the tool-call opener has no tokens".into(),
            ));
        };
        self.last_token = first;
        Ok(())
    }

    pub(super) fn finish(&mut self, reason: FinishReason, shared: &ModelShared) -> Result<()> {
        self.done = true;
        let mut reason = reason;
        let mut tool_calls = Vec::new();
        match reason {
            FinishReason::Stop | FinishReason::Length if self.matcher.is_none() => {
                let mut tail = self.leading.take().unwrap_or_default();
                tail.push_str(&self.decoder.finish(&shared.tokenizer));
                let mut filtered = self.stops.push(&tail);
                if filtered.stopped.is_none() {
                    filtered.emit.push_str(&self.stops.finish());
                }
                self.emit(filtered.emit);
            }
            FinishReason::ToolCalls | FinishReason::Length if self.matcher.is_some() => {
                match parse_call(&self.call_text) {
                    Some(call) => {
                        tool_calls.push(call);
                        reason = FinishReason::ToolCalls;
                    }
                    // Only when the token budget cut the call short.
                    None => reason = FinishReason::Length,
                }
            }
            _ => {}
        }
        let submitted = self.job.submitted;
        let ms = |from: Instant, to: Instant| to.duration_since(from).as_secs_f64() * 1e3;
        let now = Instant::now();
        let timings = Timings {
            ttft_ms: self.first_token_at.map_or(0.0, |t| ms(submitted, t)),
            inter_token_ms: match (self.first_token_at, self.last_token_at) {
                (Some(first), Some(last)) if self.generated > 1 => {
                    ms(first, last) / (self.generated - 1) as f64
                }
                _ => 0.0,
            },
            total_ms: ms(submitted, now),
        };
        let completion = Completion {
            model: self.job.model.clone(),
            text: std::mem::take(&mut self.text),
            tool_calls,
            finish_reason: reason,
            usage: Usage {
                prompt_tokens: self.job.prompt.len(),
                completion_tokens: self.generated,
            },
            cached_prompt_tokens: self.cached_prompt_tokens,
            timings,
        };
        let _ = self.job.events.send(StreamEvent::Done(completion));
        Ok(())
    }

    pub(super) fn fail(&mut self, error: Error) {
        self.done = true;
        let _ = self.job.events.send(StreamEvent::Failed(error));
    }
}

/// What the start of an auto-mode reply is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Lead {
    /// Still a prefix of a bare call: hold it back.
    Undecided,
    /// `{"name": "TOOL"`, optionally inside a ```` ``` ```` or ```` ```json ```` fence, for one
    /// of the tools: a call.
    Call,
    /// The same shape, named after no tool.
    NotATool,
    /// Anything else: the reply is text.
    Text,
}

pub(super) fn leading_call(text: &str, tools: &[String]) -> Lead {
    let mut rest = text.trim_start();
    if rest.is_empty() {
        return Lead::Undecided;
    }
    if let Some(after) = rest.strip_prefix("```") {
        let word_len = after
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(after.len());
        let (word, tail) = after.split_at(word_len);
        if !"json".starts_with(word) {
            return Lead::Text;
        }
        if tail.is_empty() {
            return Lead::Undecided;
        }
        if word != "json" && !word.is_empty() {
            return Lead::Text;
        }
        rest = tail.trim_start();
        if rest.is_empty() {
            return Lead::Undecided;
        }
    } else if "```".starts_with(rest) {
        return Lead::Undecided;
    }
    let Some(object) = rest.strip_prefix('{') else {
        return Lead::Text;
    };
    // A name key (`"name"`, or `"type"`, `"tool"`, `"function"` as small models also write
    // calls), then `:` and the opening quote of the name, whitespace allowed between.
    let mut rest = object.trim_start();
    let keys = ["\"name\"", "\"type\"", "\"tool\"", "\"function\""];
    match keys.iter().find(|key| rest.starts_with(*key)) {
        Some(key) => rest = &rest[key.len()..],
        None if keys.iter().any(|key| key.starts_with(rest)) => return Lead::Undecided,
        None => return Lead::Text,
    }
    for part in [":", "\""] {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix(part) {
            rest = after;
        } else if part.starts_with(rest) {
            return Lead::Undecided;
        } else {
            return Lead::Text;
        }
    }
    match rest.split_once('"') {
        Some((name, _)) if tools.iter().any(|t| t == name) => Lead::Call,
        Some(_) => Lead::NotATool,
        None if tools.iter().any(|t| t.starts_with(rest)) => Lead::Undecided,
        None => Lead::NotATool,
    }
}

pub(super) fn parse_call(text: &str) -> Option<ToolCall> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = value.get("arguments")?.to_string();
    Some(ToolCall {
        id: format!("call_{:016x}", rand::random::<u64>()),
        name,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::{leading_call, Lead};

    fn tools() -> Vec<String> {
        vec!["clock".into(), "remember".into()]
    }

    #[test]
    fn a_bare_or_fenced_json_call_is_recognised_once_its_tool_is_named() {
        for text in [
            "{\"name\": \"clock\"",
            "  {\"name\": \"clock\", \"arguments\"",
            "{ \"name\" : \"remember\"",
            "{\"type\":\"clock\"}",
            "{\"tool\": \"remember\", \"arguments\"",
            "```json\n{\"name\": \"clock\"",
            "```\n{\n  \"name\": \"remember\"",
            "\n```json {\"name\":\"clock\"",
        ] {
            assert_eq!(leading_call(text, &tools()), Lead::Call, "{text:?}");
        }
    }

    #[test]
    fn prefixes_of_a_call_are_held_back() {
        for text in [
            "",
            " \n",
            "`",
            "``",
            "```",
            "```js",
            "```json",
            "```json\n",
            "{",
            "{\"na",
            "{\"name\"",
            "{\"name\": ",
            "{\"name\": \"",
            "{\"name\": \"rem",
            "{\"ty",
            "{\"function\": \"cl",
        ] {
            assert_eq!(leading_call(text, &tools()), Lead::Undecided, "{text:?}");
        }
    }

    #[test]
    fn json_named_after_no_tool_is_told_apart() {
        for text in [
            "{\"name\": \"Joke\"",
            "{\"name\": \"clocks\"",
            "```json\n{\"name\": \"x",
        ] {
            assert_eq!(leading_call(text, &tools()), Lead::NotATool, "{text:?}");
        }
    }

    #[test]
    fn anything_else_is_text() {
        for text in [
            "Hello",
            "<tool_call>",
            "```python\n",
            "```jsonl\n{",
            "{\"note\": 1}",
            "{\"names\"",
            "{\"name\" 1",
            "[1, 2]",
            "`code`",
        ] {
            assert_eq!(leading_call(text, &tools()), Lead::Text, "{text:?}");
        }
    }
}

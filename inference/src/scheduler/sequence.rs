//! One row of a worker's running batch: its sampler, detokenizer, stop filter and tool-call
//! grammar, one decode step at a time.

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
        if matches!(job.tools, ToolMode::Auto { .. }) {
            stops.push(TOOL_CALL_OPEN.to_string());
        }
        let matcher = match &job.tools {
            ToolMode::Forced { schema } => {
                match shared.grammar.matcher(schema.clone(), grammar_budget) {
                    Ok(matcher) => Some(matcher),
                    Err(message) => {
                        let error = Error::InvalidToolSchema {
                            tool: "*".into(),
                            message,
                        };
                        return Err((Box::new(job), error));
                    }
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

    /// Picks the next token from this row's logits and acts on it.
    pub(super) fn step(&mut self, logits: &[f32], shared: &ModelShared) -> Result<()> {
        if self.job.abandoned() {
            return self.finish(FinishReason::Cancelled, shared);
        }
        let token = match &mut self.matcher {
            Some(matcher) => {
                let mut masked = logits.to_vec();
                mask_logits(matcher, &mut masked)?;
                self.sampler.sample(&masked)
            }
            None if self.job.sampling.ignore_eos => {
                let mut masked = logits.to_vec();
                for &eos in &shared.eos_ids {
                    masked[eos as usize] = f32::NEG_INFINITY;
                }
                self.sampler.sample(&masked)
            }
            None => self.sampler.sample(logits),
        };
        let now = Instant::now();
        self.first_token_at.get_or_insert(now);
        self.last_token_at = Some(now);
        self.generated += 1;
        self.job.progress.store(self.generated, Ordering::Relaxed);
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
                return self.finish(FinishReason::ToolCalls, shared);
            }
        } else if shared.eos_ids.contains(&token) {
            return self.finish(FinishReason::Stop, shared);
        } else {
            let piece = self.decoder.push(&shared.tokenizer, token);
            let filtered = self.stops.push(&piece);
            self.emit(filtered.emit);
            match filtered.stopped {
                Some(stop) if stop == TOOL_CALL_OPEN => {
                    let ToolMode::Auto { schema } = &self.job.tools else {
                        unreachable!("the tool-call opener is a stop only in auto mode")
                    };
                    let budget = self.job.sampling.max_tokens.saturating_sub(self.generated);
                    let matcher = shared
                        .grammar
                        .matcher(schema.clone(), budget)
                        .map_err(|e| Error::InvalidToolSchema {
                            tool: "*".into(),
                            message: e,
                        })?;
                    self.matcher = Some(matcher);
                    // Text the opener's last token carried after `<tool_call>` is dropped: the
                    // grammar starts on the next token.
                    self.decoder = IncrementalDecoder::new();
                }
                Some(_) => return self.finish(FinishReason::Stop, shared),
                None => {}
            }
        }
        if self.generated >= self.job.sampling.max_tokens {
            return self.finish(FinishReason::Length, shared);
        }
        Ok(())
    }

    pub(super) fn finish(&mut self, reason: FinishReason, shared: &ModelShared) -> Result<()> {
        self.done = true;
        let mut reason = reason;
        let mut tool_calls = Vec::new();
        match reason {
            FinishReason::Stop | FinishReason::Length if self.matcher.is_none() => {
                let tail = self.decoder.finish(&shared.tokenizer);
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

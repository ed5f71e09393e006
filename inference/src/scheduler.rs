//! Engine workers and continuous batching.
//!
//! Each worker is an OS thread that owns one [`Engine`] (ONNX Runtime calls block, so they stay
//! off the async runtime). Between decode steps a worker takes queued jobs, prefills each one,
//! and merges it into its running batch; rows that finish, fail or are cancelled leave the
//! batch before the next step. A caller that cancels, or drops its stream, is noticed before
//! the next step, so a cancelled row decodes at most one more token.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Instant;

use llguidance::Matcher;
use serde_json::Value;
use tokenizers::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

use crate::constrained::{mask_logits, ToolGrammar};
use crate::engine::{CacheRef, Engine, KvCache, RowSource, SharedCache};
use crate::sampling::Sampler;
use crate::template::TOOL_CALL_OPEN;
use crate::text::{IncrementalDecoder, StopFilter};
use crate::{
    Completion, Error, FinishReason, Result, SamplingParams, StreamEvent, Timings, ToolCall, Usage,
};

/// Most prompt positions (rows × longest prompt) one batched prefill pass may hold.
const PREFILL_TOKEN_BUDGET: usize = 2048;

/// How a job may call tools.
#[derive(Debug, Clone)]
pub enum ToolMode {
    None,
    /// Free text until the model writes `<tool_call>`, then constrained to `schema`.
    Auto {
        schema: Value,
    },
    /// The prompt already ends with `<tool_call>`: constrained from the first token.
    Forced {
        schema: Value,
    },
}

/// A validated, tokenized request waiting for a worker.
pub struct Job {
    pub model: String,
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    pub tools: ToolMode,
    pub events: UnboundedSender<StreamEvent>,
    pub cancel: Arc<AtomicBool>,
    /// Tokens generated so far, visible to the caller.
    pub progress: Arc<AtomicUsize>,
    pub submitted: Instant,
}

impl Job {
    fn abandoned(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.events.is_closed()
    }

    /// Answers a job cancelled before it decoded anything.
    fn cancelled_before_start(&self) {
        let _ = self.events.send(StreamEvent::Done(Completion {
            model: self.model.clone(),
            text: String::new(),
            tool_calls: Vec::new(),
            finish_reason: FinishReason::Cancelled,
            usage: Usage {
                prompt_tokens: self.prompt.len(),
                completion_tokens: 0,
            },
            timings: Timings::default(),
        }));
    }
}

/// The bounded queue between the pool's front and its workers.
pub struct WorkQueue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
    capacity: usize,
    closed: AtomicBool,
    /// Rows currently decoding, across workers (for stats).
    pub active: AtomicUsize,
    /// Most rows any worker has decoded in one step.
    pub peak_batch: AtomicUsize,
}

impl WorkQueue {
    pub fn new(capacity: usize) -> Self {
        WorkQueue {
            jobs: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            capacity: capacity.max(1),
            closed: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            peak_batch: AtomicUsize::new(0),
        }
    }

    /// Queues a job, or answers `Overloaded` at once when the queue is full.
    pub fn push(&self, job: Job) -> Result<()> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        if self.closed.load(Ordering::Relaxed) {
            return Err(Error::ShutDown);
        }
        // Jobs whose callers went away while waiting free their slots now.
        jobs.retain(|waiting| {
            let keep = !waiting.abandoned();
            if !keep {
                waiting.cancelled_before_start();
            }
            keep
        });
        if jobs.len() >= self.capacity {
            return Err(Error::Overloaded { queued: jobs.len() });
        }
        jobs.push_back(job);
        drop(jobs);
        self.ready.notify_one();
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn try_pop(&self) -> Option<Job> {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
    }

    /// Waits for a job; `None` once the queue is closed and drained.
    fn pop_blocking(&self) -> Option<Job> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(job) = jobs.pop_front() {
                return Some(job);
            }
            if self.closed.load(Ordering::Relaxed) {
                return None;
            }
            jobs = self
                .ready
                .wait(jobs)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Refuses new jobs, fails the waiting ones, and tells workers to stop (rows decoding
    /// end as cancelled before their next step).
    pub fn close(&self) {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        self.closed.store(true, Ordering::Relaxed);
        for job in jobs.drain(..) {
            let _ = job.events.send(StreamEvent::Failed(Error::ShutDown));
        }
        drop(jobs);
        self.ready.notify_all();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}

/// What every worker of one model shares.
pub struct ModelShared {
    pub tokenizer: Tokenizer,
    pub grammar: ToolGrammar,
    pub eos_ids: Vec<u32>,
}

/// One row of the running batch.
struct Sequence {
    job: Job,
    sampler: Sampler,
    decoder: IncrementalDecoder,
    stops: StopFilter,
    /// Set while writing a tool call.
    matcher: Option<Matcher>,
    call_text: String,
    text: String,
    generated: usize,
    last_token: u32,
    /// Positions of this row in the KV cache.
    valid_len: usize,
    first_token_at: Option<Instant>,
    last_token_at: Option<Instant>,
    done: bool,
}

impl Sequence {
    fn new(
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
            first_token_at: None,
            last_token_at: None,
            done: false,
            job,
        })
    }

    /// Cache positions this row may still need: what it holds, its remaining token budget,
    /// and the position of the token being decoded.
    fn room_needed(&self) -> usize {
        self.valid_len
            .saturating_add(self.job.sampling.max_tokens.saturating_sub(self.generated))
            .saturating_add(1)
    }

    fn emit(&mut self, delta: String) {
        if !delta.is_empty() {
            self.text.push_str(&delta);
            let _ = self.job.events.send(StreamEvent::Delta(delta));
        }
    }

    /// Picks the next token from this row's logits and acts on it.
    fn step(&mut self, logits: &[f32], shared: &ModelShared) -> Result<()> {
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

    fn finish(&mut self, reason: FinishReason, shared: &ModelShared) -> Result<()> {
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
            timings,
        };
        let _ = self.job.events.send(StreamEvent::Done(completion));
        Ok(())
    }

    fn fail(&mut self, error: Error) {
        self.done = true;
        let _ = self.job.events.send(StreamEvent::Failed(error));
    }
}

fn parse_call(text: &str) -> Option<ToolCall> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = value.get("arguments")?.to_string();
    Some(ToolCall {
        id: format!("call_{:016x}", rand::random::<u64>()),
        name,
        arguments,
    })
}

/// Settings of one worker.
pub struct WorkerSettings {
    pub max_batch: usize,
}

/// The worker loop: runs until the queue is closed and its batch has drained.
pub fn run_worker(
    mut engine: Engine,
    shared: Arc<ModelShared>,
    queue: Arc<WorkQueue>,
    settings: WorkerSettings,
) {
    let vocab = engine.config.vocab_size;
    let context = engine.config.context_length;
    let mut active: Vec<Sequence> = Vec::new();
    let mut cache: Option<SharedCache> = None;
    loop {
        // Admit new work between steps.
        let mut incoming = Vec::new();
        if active.is_empty() {
            match queue.pop_blocking() {
                Some(job) => incoming.push(job),
                None => return,
            }
        }
        while active.len() + incoming.len() < settings.max_batch {
            match queue.try_pop() {
                Some(job) => incoming.push(job),
                None => break,
            }
        }
        // Prefill every newcomer in one pass.
        let mut newcomers = Vec::new();
        for job in incoming {
            if job.abandoned() {
                job.cancelled_before_start();
                continue;
            }
            let budget = job.sampling.max_tokens;
            match Sequence::new(job, &shared, budget) {
                Ok(sequence) => newcomers.push(sequence),
                Err((job, error)) => {
                    tracing::warn!(%error, "inference job refused at start");
                    let _ = job.events.send(StreamEvent::Failed(error));
                }
            }
        }
        // Newcomers are prefilled together, in groups small enough that the pass's logits
        // (one row per prompt position) stay bounded.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut longest = 0;
        for (index, sequence) in newcomers.iter().enumerate() {
            let len = sequence.job.prompt.len();
            let grown = longest.max(len);
            match groups.last_mut() {
                Some(group) if grown * (group.len() + 1) <= PREFILL_TOKEN_BUDGET => {
                    group.push(index);
                    longest = grown;
                }
                _ => {
                    groups.push(vec![index]);
                    longest = len;
                }
            }
        }
        queue.active.fetch_add(newcomers.len(), Ordering::Relaxed);
        let mut prefill_caches: Vec<KvCache> = Vec::new();
        let mut placement: Vec<Option<(usize, usize)>> = vec![None; newcomers.len()];
        for group in groups {
            let prompts: Vec<Vec<u32>> = group
                .iter()
                .map(|&i| newcomers[i].job.prompt.clone())
                .collect();
            let prompts: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
            match engine.prefill(&prompts) {
                Ok((logits, kv)) => {
                    let cache_index = prefill_caches.len();
                    prefill_caches.push(kv);
                    for (row, &i) in group.iter().enumerate() {
                        if let Err(error) = newcomers[i].step(&logits[row], &shared) {
                            newcomers[i].fail(error);
                        }
                        placement[i] = Some((cache_index, row));
                    }
                }
                Err(error) => {
                    for &i in &group {
                        newcomers[i].fail(error.clone());
                    }
                }
            }
        }
        let mut joining: Vec<((usize, usize), Sequence)> = Vec::new();
        for (sequence, place) in newcomers.into_iter().zip(placement) {
            match place {
                Some(place) if !sequence.done => joining.push((place, sequence)),
                _ => {
                    queue.active.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }

        // Rows that ended leave; new rows join. Regroup the cache only when that changed.
        let leaving = active.iter().filter(|s| s.done).count();
        if leaving > 0 || !joining.is_empty() {
            let rebuilt = {
                let mut sources = Vec::new();
                let mut needed = 0;
                if let Some(cache) = &cache {
                    for (row, sequence) in active.iter().enumerate() {
                        if !sequence.done {
                            needed = needed.max(sequence.room_needed());
                            sources.push(RowSource {
                                cache: CacheRef::Batch(cache),
                                row,
                                valid_len: sequence.valid_len,
                            });
                        }
                    }
                }
                for ((cache_index, row), sequence) in &joining {
                    needed = needed.max(sequence.room_needed());
                    sources.push(RowSource {
                        cache: CacheRef::Prefill(&prefill_caches[*cache_index]),
                        row: *row,
                        valid_len: sequence.valid_len,
                    });
                }
                if sources.is_empty() {
                    Ok(None)
                } else {
                    // Room for every row's remaining budget, in steps of 64 positions.
                    let capacity = needed.div_ceil(64).saturating_mul(64).min(context);
                    engine.regroup(&sources, capacity).map(Some)
                }
            };
            queue.active.fetch_sub(leaving, Ordering::Relaxed);
            active.retain(|s| !s.done);
            active.extend(joining.into_iter().map(|(_, sequence)| sequence));
            match rebuilt {
                Ok(rebuilt) => cache = rebuilt,
                Err(error) => {
                    fail_all(&mut active, &queue, error);
                    cache = None;
                    continue;
                }
            }
        }
        if active.is_empty() {
            cache = None;
            continue;
        }

        // Rows whose caller went away (or whose pool is shutting down) leave without
        // another step.
        let stopping = queue.is_closed();
        let mut abandoned = false;
        for sequence in active.iter_mut().filter(|s| stopping || s.job.abandoned()) {
            let _ = sequence.finish(FinishReason::Cancelled, &shared);
            abandoned = true;
        }
        if abandoned {
            continue;
        }

        queue.peak_batch.fetch_max(active.len(), Ordering::Relaxed);
        let tokens: Vec<u32> = active.iter().map(|s| s.last_token).collect();
        let valid: Vec<usize> = active.iter().map(|s| s.valid_len).collect();
        let Some(batch_cache) = cache.as_mut() else {
            fail_all(
                &mut active,
                &queue,
                Error::Inference("lost the KV cache".into()),
            );
            continue;
        };
        match engine.decode_shared(&tokens, &valid, batch_cache) {
            Ok(logits) => {
                for (row, sequence) in active.iter_mut().enumerate() {
                    // Admission guarantees prompt + max_tokens ≤ context, so a row reaches
                    // `max_tokens` before the cache could overflow.
                    sequence.valid_len += 1;
                    let result = sequence.step(&logits[row * vocab..(row + 1) * vocab], &shared);
                    if let Err(error) = result {
                        sequence.fail(error);
                    }
                }
            }
            Err(error) => {
                fail_all(&mut active, &queue, error);
                cache = None;
            }
        }
    }
}

fn fail_all(active: &mut Vec<Sequence>, queue: &WorkQueue, error: Error) {
    tracing::error!(%error, rows = active.len(), "decode step failed");
    for sequence in active.iter_mut() {
        sequence.fail(error.clone());
    }
    queue.active.fetch_sub(active.len(), Ordering::Relaxed);
    active.clear();
}

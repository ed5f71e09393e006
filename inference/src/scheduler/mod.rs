//! Engine workers and continuous batching.
//!
//! Each worker is an OS thread that owns one [`Engine`] (ONNX Runtime calls block, so they stay
//! off the async runtime). Between decode steps a worker takes queued jobs, prefills each one,
//! and merges it into its running batch; rows that finish, fail or are cancelled leave the
//! batch before the next step. A caller that cancels, or drops its stream, is noticed before
//! the next step, so a cancelled row decodes at most one more token.

mod queue;
mod sequence;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use tokenizers::Tokenizer;

use crate::constrained::ToolGrammar;
use crate::engine::{CacheRef, Engine, KvCache, KvRows, RowSource, SharedCache};
use crate::prefix_cache::PrefixCache;
use crate::{Error, FinishReason, StreamEvent};

pub use self::queue::{Job, ToolMode, WorkQueue};
use self::sequence::Sequence;

/// Most prompt positions (rows × longest prompt) one batched prefill pass may hold.
const PREFILL_TOKEN_BUDGET: usize = 2048;

/// Prompt tokens always prefilled, never taken from the prefix cache: the last one gives the
/// logits, and two keep the pass on the prefill kernels (a one-token pass with a past runs the
/// decode kernels, which round differently), so a hit computes what a full prefill would.
pub const MIN_SUFFIX: usize = 2;

/// What every worker of one model shares.
pub struct ModelShared {
    pub tokenizer: Tokenizer,
    pub grammar: ToolGrammar,
    pub eos_ids: Vec<u32>,
    /// `<tool_call>` as the model's tokens: fed in place of a call the model began as bare JSON.
    pub call_opener: Vec<u32>,
    /// Tokens that open a JSON object or code fence: banned at the start of a reply that is
    /// decoded again as text (see `Sequence::answer_in_text`).
    pub json_openers: Vec<u32>,
    /// The KV of recent prompts, shared by the workers (their queue is shared, so a
    /// conversation's next step may land on either); `None` when the cache is off.
    pub prefix: Option<Mutex<PrefixCache>>,
}

impl ModelShared {
    fn prefix_cache(&self) -> Option<std::sync::MutexGuard<'_, PrefixCache>> {
        self.prefix
            .as_ref()
            .map(|cache| cache.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Stores row `row` of a prefill's cache as `prompt`'s KV.
    fn remember(&self, engine: &Engine, prompt: &[u32], kv: &KvCache, row: usize) {
        let Some(mut cache) = self.prefix_cache() else {
            return;
        };
        match KvRows::new(engine, kv, row) {
            Ok(rows) => cache.insert(prompt, &rows),
            Err(error) => tracing::warn!(%error, "cannot read a prefill's KV for the prefix cache"),
        }
    }

    /// Forgets the prefix cache after an engine error (a precaution: what it holds was
    /// computed before, by passes that succeeded).
    fn forget_prefixes(&self) {
        if let Some(mut cache) = self.prefix_cache() {
            cache.clear();
        }
    }
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
        queue.active.fetch_add(newcomers.len(), Ordering::Relaxed);
        let mut prefill_caches: Vec<KvCache> = Vec::new();
        let mut placement: Vec<Option<(usize, usize)>> = vec![None; newcomers.len()];
        // A newcomer whose prompt starts with a cached prefix continues it in a pass of its own
        // (a past plus several new tokens works at batch 1 only); one hit's copy at a time.
        let mut misses = Vec::new();
        for (index, sequence) in newcomers.iter_mut().enumerate() {
            let prompt = &sequence.job.prompt;
            let hit = shared.prefix_cache().and_then(|mut cache| {
                cache.lookup(prompt, prompt.len().saturating_sub(MIN_SUFFIX))
            });
            let Some(hit) = hit else {
                misses.push(index);
                continue;
            };
            let done = hit.len;
            let continued = engine
                .past_from(hit)
                .and_then(|past| engine.prefill_continue(past, done, &prompt[done..]));
            match continued {
                Ok((mut logits, kv)) => {
                    shared.remember(&engine, &sequence.job.prompt, &kv, 0);
                    sequence.cached_prompt_tokens = done;
                    if let Err(error) = sequence.step(&mut logits[0], &shared) {
                        sequence.fail(error);
                    }
                    placement[index] = Some((prefill_caches.len(), 0));
                    prefill_caches.push(kv);
                }
                Err(error) => {
                    shared.forget_prefixes();
                    sequence.fail(error);
                }
            }
        }
        // The others are prefilled together, in groups small enough that the pass's
        // activations (one row per prompt position) stay bounded.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut longest = 0;
        for &index in &misses {
            let len = newcomers[index].job.prompt.len();
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
        for group in groups {
            let prompts: Vec<Vec<u32>> = group
                .iter()
                .map(|&i| newcomers[i].job.prompt.clone())
                .collect();
            let prompts: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
            match engine.prefill(&prompts) {
                Ok((mut logits, kv)) => {
                    let cache_index = prefill_caches.len();
                    for (row, &i) in group.iter().enumerate() {
                        shared.remember(&engine, prompts[row], &kv, row);
                        if let Err(error) = newcomers[i].step(&mut logits[row], &shared) {
                            newcomers[i].fail(error);
                        }
                        placement[i] = Some((cache_index, row));
                    }
                    prefill_caches.push(kv);
                }
                Err(error) => {
                    shared.forget_prefixes();
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
        let stepped = engine
            .decode_shared(&tokens, &valid, batch_cache)
            .and_then(|mut logits| {
                let logits = logits.rows_mut(active.len() * vocab)?;
                for (row, sequence) in active.iter_mut().enumerate() {
                    // Admission guarantees prompt + max_tokens ≤ context, so a row reaches
                    // `max_tokens` before the cache could overflow.
                    sequence.valid_len += 1;
                    let result =
                        sequence.step(&mut logits[row * vocab..(row + 1) * vocab], &shared);
                    if let Err(error) = result {
                        sequence.fail(error);
                    }
                }
                Ok(())
            });
        if let Err(error) = stepped {
            fail_all(&mut active, &queue, error);
            cache = None;
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

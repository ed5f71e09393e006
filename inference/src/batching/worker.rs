//! One worker: an OS thread that owns an [`Engine`] and runs continuous batching over it —
//! between decode steps it admits queued jobs, prefills them (continuing a cached prefix where
//! one matches), regroups the batch's cache when rows leave or join, and decodes one token for
//! every row.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::sequence::Sequence;
use super::{Job, ModelShared, WorkQueue, MIN_SUFFIX, PREFILL_TOKEN_BUDGET};
use crate::engine::{CacheRef, Engine, KvCache, RowSource, SharedCache};
use crate::{Error, FinishReason, StreamEvent};

/// Settings of one worker.
pub struct WorkerSettings {
    pub max_batch: usize,
}

/// The worker loop: runs until the queue is closed and its batch has drained.
pub fn run_worker(
    engine: Engine,
    shared: Arc<ModelShared>,
    queue: Arc<WorkQueue>,
    settings: WorkerSettings,
) {
    let mut worker = Worker {
        vocab: engine.config.vocab_size,
        context: engine.config.context_length,
        engine,
        shared,
        queue,
        settings,
        active: Vec::new(),
        cache: None,
    };
    while let Some(incoming) = worker.admit() {
        let mut newcomers = worker.start(incoming);
        let (prefill_caches, placement) = worker.prefill(&mut newcomers);
        let mut joining: Vec<((usize, usize), Sequence)> = Vec::new();
        for (sequence, place) in newcomers.into_iter().zip(placement) {
            match place {
                Some(place) if !sequence.done => joining.push((place, sequence)),
                _ => {
                    worker.queue.active.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        if !worker.regroup(joining, &prefill_caches) || worker.drop_stopped() {
            continue;
        }
        worker.decode();
    }
}

/// A worker's engine, its batch and the batch's shared KV cache.
struct Worker {
    engine: Engine,
    shared: Arc<ModelShared>,
    queue: Arc<WorkQueue>,
    settings: WorkerSettings,
    vocab: usize,
    context: usize,
    active: Vec<Sequence>,
    cache: Option<SharedCache>,
}

impl Worker {
    /// New work, taken between steps (waiting for some when the batch is empty); `None` once
    /// the queue is closed and the batch has drained.
    fn admit(&self) -> Option<Vec<Job>> {
        let mut incoming = Vec::new();
        if self.active.is_empty() {
            incoming.push(self.queue.pop_blocking()?);
        }
        while self.active.len() + incoming.len() < self.settings.max_batch {
            match self.queue.try_pop() {
                Some(job) => incoming.push(job),
                None => break,
            }
        }
        Some(incoming)
    }

    /// The admitted jobs as sequences (a job whose caller left, or that cannot start, ends
    /// here), counted as active.
    fn start(&self, incoming: Vec<Job>) -> Vec<Sequence> {
        let mut newcomers = Vec::new();
        for job in incoming {
            if job.abandoned() {
                job.cancelled_before_start();
                continue;
            }
            let budget = job.sampling.max_tokens;
            match Sequence::new(job, &self.shared, budget) {
                Ok(sequence) => newcomers.push(sequence),
                Err((job, error)) => {
                    tracing::warn!(%error, "inference job refused at start");
                    let _ = job.events.send(StreamEvent::Failed(error));
                }
            }
        }
        self.queue
            .active
            .fetch_add(newcomers.len(), Ordering::Relaxed);
        newcomers
    }

    /// Prefills every newcomer and samples its first token: the prefill caches, and where
    /// each newcomer's row is in them (`None`: it failed).
    fn prefill(
        &mut self,
        newcomers: &mut [Sequence],
    ) -> (Vec<KvCache>, Vec<Option<(usize, usize)>>) {
        let mut prefill_caches: Vec<KvCache> = Vec::new();
        let mut placement: Vec<Option<(usize, usize)>> = vec![None; newcomers.len()];
        let misses = self.continue_prefixes(newcomers, &mut prefill_caches, &mut placement);
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
            match self.engine.prefill(&prompts) {
                Ok((mut logits, kv)) => {
                    let cache_index = prefill_caches.len();
                    for (row, &i) in group.iter().enumerate() {
                        self.shared.remember(&self.engine, prompts[row], &kv, row);
                        if let Err(error) = newcomers[i].step(&mut logits[row], &self.shared) {
                            newcomers[i].fail(error);
                        }
                        placement[i] = Some((cache_index, row));
                    }
                    prefill_caches.push(kv);
                }
                Err(error) => {
                    self.shared.forget_prefixes();
                    for &i in &group {
                        newcomers[i].fail(error.clone());
                    }
                }
            }
        }
        (prefill_caches, placement)
    }

    /// A newcomer whose prompt starts with a cached prefix continues it in a pass of its own
    /// (a past plus several new tokens works at batch 1 only); one hit's copy at a time.
    /// Returns the newcomers that missed.
    fn continue_prefixes(
        &mut self,
        newcomers: &mut [Sequence],
        prefill_caches: &mut Vec<KvCache>,
        placement: &mut [Option<(usize, usize)>],
    ) -> Vec<usize> {
        let mut misses = Vec::new();
        for (index, sequence) in newcomers.iter_mut().enumerate() {
            let prompt = &sequence.job.prompt;
            let hit = self.shared.prefix_cache().and_then(|mut cache| {
                cache.lookup(prompt, prompt.len().saturating_sub(MIN_SUFFIX))
            });
            let Some(hit) = hit else {
                misses.push(index);
                continue;
            };
            let done = hit.len;
            let continued = self
                .engine
                .past_from(hit)
                .and_then(|past| self.engine.prefill_continue(past, done, &prompt[done..]));
            match continued {
                Ok((mut logits, kv)) => {
                    self.shared
                        .remember(&self.engine, &sequence.job.prompt, &kv, 0);
                    sequence.cached_prompt_tokens = done;
                    if let Err(error) = sequence.step(&mut logits[0], &self.shared) {
                        sequence.fail(error);
                    }
                    placement[index] = Some((prefill_caches.len(), 0));
                    prefill_caches.push(kv);
                }
                Err(error) => {
                    self.shared.forget_prefixes();
                    sequence.fail(error);
                }
            }
        }
        misses
    }

    /// Rows that ended leave; new rows join. The cache is regrouped only when that changed.
    /// `false`: there is nothing to decode now (no rows, or the regroup failed them all).
    fn regroup(
        &mut self,
        joining: Vec<((usize, usize), Sequence)>,
        prefill_caches: &[KvCache],
    ) -> bool {
        let leaving = self.active.iter().filter(|s| s.done).count();
        if leaving > 0 || !joining.is_empty() {
            let rebuilt = {
                let mut sources = Vec::new();
                let mut needed = 0;
                if let Some(cache) = &self.cache {
                    for (row, sequence) in self.active.iter().enumerate() {
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
                    let capacity = needed.div_ceil(64).saturating_mul(64).min(self.context);
                    self.engine.regroup(&sources, capacity).map(Some)
                }
            };
            self.queue.active.fetch_sub(leaving, Ordering::Relaxed);
            self.active.retain(|s| !s.done);
            self.active
                .extend(joining.into_iter().map(|(_, sequence)| sequence));
            match rebuilt {
                Ok(rebuilt) => self.cache = rebuilt,
                Err(error) => {
                    fail_all(&mut self.active, &self.queue, error);
                    self.cache = None;
                    return false;
                }
            }
        }
        if self.active.is_empty() {
            self.cache = None;
            return false;
        }
        true
    }

    /// Rows whose caller went away (or whose pool is shutting down) leave without another
    /// step; whether any did.
    fn drop_stopped(&mut self) -> bool {
        let stopping = self.queue.is_closed();
        let mut abandoned = false;
        for sequence in self
            .active
            .iter_mut()
            .filter(|s| stopping || s.job.abandoned())
        {
            let _ = sequence.finish(FinishReason::Cancelled, &self.shared);
            abandoned = true;
        }
        abandoned
    }

    /// One decode step: a token for every row.
    fn decode(&mut self) {
        let vocab = self.vocab;
        self.queue
            .peak_batch
            .fetch_max(self.active.len(), Ordering::Relaxed);
        let tokens: Vec<u32> = self.active.iter().map(|s| s.last_token).collect();
        let valid: Vec<usize> = self.active.iter().map(|s| s.valid_len).collect();
        let Some(batch_cache) = self.cache.as_mut() else {
            fail_all(
                &mut self.active,
                &self.queue,
                Error::Inference("lost the KV cache".into()),
            );
            return;
        };
        let active = &mut self.active;
        let shared = &self.shared;
        let stepped = self
            .engine
            .decode_shared(&tokens, &valid, batch_cache)
            .and_then(|mut logits| {
                let logits = logits.rows_mut(active.len() * vocab)?;
                for (row, sequence) in active.iter_mut().enumerate() {
                    // Admission guarantees prompt + max_tokens ≤ context, so a row reaches
                    // `max_tokens` before the cache could overflow.
                    sequence.valid_len += 1;
                    let result = sequence.step(&mut logits[row * vocab..(row + 1) * vocab], shared);
                    if let Err(error) = result {
                        sequence.fail(error);
                    }
                }
                Ok(())
            });
        if let Err(error) = stepped {
            fail_all(&mut self.active, &self.queue, error);
            self.cache = None;
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

//! The work queue in front of a model's workers: bounded, closable, and the jobs it holds.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Instant;

use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use crate::{Completion, Error, FinishReason, Result, SamplingParams, StreamEvent, Timings, Usage};

/// How a job may call tools.
#[derive(Debug, Clone)]
pub enum ToolMode {
    None,
    /// Free text until the model writes `<tool_call>` (or begins its reply with a bare JSON
    /// call to one of `names`), then constrained to `schema`.
    Auto {
        schema: Value,
        names: Vec<String>,
        /// The calls whose results end the conversation, as `(name, arguments)`: a reply that
        /// only repeats one of them is decoded again as text (empty: no guard).
        answered: Vec<(String, Value)>,
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
    pub(super) fn abandoned(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.events.is_closed()
    }

    /// Answers a job cancelled before it decoded anything.
    pub(super) fn cancelled_before_start(&self) {
        let _ = self.events.send(StreamEvent::Done(Completion {
            model: self.model.clone(),
            text: String::new(),
            tool_calls: Vec::new(),
            finish_reason: FinishReason::Cancelled,
            usage: Usage {
                prompt_tokens: self.prompt.len(),
                completion_tokens: 0,
            },
            cached_prompt_tokens: 0,
            timings: Timings::default(),
        }));
    }
}

/// The bounded queue between the pool's front and its workers.
pub struct WorkQueue {
    pub(super) jobs: Mutex<VecDeque<Job>>,
    pub(super) ready: Condvar,
    pub(super) capacity: usize,
    pub(super) closed: AtomicBool,
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

    pub(super) fn try_pop(&self) -> Option<Job> {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
    }

    /// Waits for a job; `None` once the queue is closed and drained.
    pub(super) fn pop_blocking(&self) -> Option<Job> {
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

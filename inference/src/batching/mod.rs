//! Engine workers and continuous batching.
//!
//! Each worker is an OS thread that owns one [`Engine`] (ONNX Runtime calls block, so they stay
//! off the async runtime). Between decode steps a worker takes queued jobs, prefills each one,
//! and merges it into its running batch; rows that finish, fail or are cancelled leave the
//! batch before the next step. A caller that cancels, or drops its stream, is noticed before
//! the next step, so a cancelled row decodes at most one more token.

mod queue;
mod sequence;
mod worker;

use std::sync::{Mutex, PoisonError};

use tokenizers::Tokenizer;

use crate::constrained::ToolGrammar;
use crate::engine::{Engine, KvCache, KvRows};
use crate::prefix_cache::PrefixCache;

pub use self::queue::{Job, ToolMode, WorkQueue};
pub use self::worker::{run_worker, WorkerSettings};

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

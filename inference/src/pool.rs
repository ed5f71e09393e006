//! The pooled inference actor: the front every caller talks to.
//!
//! [`InferencePool::generate`] validates and tokenizes a request on the caller's task, then asks
//! the pool actor (ractor) to admit it: a full queue is answered at once with
//! [`Error::Overloaded`], never by waiting. Admitted jobs wait in a bounded queue for one of the
//! engine workers ([`crate::batching`]), which batch them continuously. The caller reads a
//! stream of [`StreamEvent`]s; cancelling it, or dropping it, stops the job before its next
//! decode step.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokenizers::Tokenizer;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::batching::{run_worker, Job, ModelShared, ToolMode, WorkQueue, WorkerSettings};
use crate::constrained::ToolGrammar;
use crate::engine::{init_runtime, Engine, ExecutionProvider};
use crate::model_dir::{ModelConfig, ModelDir};
use crate::prefix_cache::{PrefixCache, PrefixStats, PrefixStatsSnapshot};
use crate::template::{ChatTemplate, TOOL_CALL_OPEN};
use crate::{ChatRequest, Completion, Error, Result, StreamEvent, ToolChoice};

/// How to run one local model.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The name requests use for this model.
    pub model_name: String,
    pub model_dir: PathBuf,
    /// `libonnxruntime.so` prepared by `stead setup`.
    pub runtime_library: PathBuf,
    pub execution_provider: ExecutionProvider,
    /// Engine workers (each owns a session and decodes its own batch).
    pub workers: usize,
    /// Intra-op threads per worker; 0 = physical cores ÷ workers.
    pub threads_per_worker: usize,
    /// Most rows one worker decodes together.
    pub max_batch: usize,
    /// Most jobs waiting for a worker before new ones are refused.
    pub queue_capacity: usize,
    /// Longest prompt piece prefilled in one pass (longer prompts continue in chunks).
    pub prefill_chunk: usize,
    /// Memory for the KV of recent prompt prefixes, all workers together; 0 = no prefix cache.
    pub prefix_cache_bytes: usize,
    /// Shortest cached prefix reused; shorter matches are prefilled.
    pub prefix_cache_min_tokens: usize,
    /// In `auto` tool mode, a reply that only repeats the call whose result the model was just
    /// given is decoded again as text (small models otherwise loop on a tool).
    pub block_repeated_calls: bool,
    /// The prompt adapters for small models ([`crate::adapt`]; both on by default).
    pub adapters: crate::adapt::Adapters,
}

/// 256 MiB: about 5,800 tokens of SmolLM2-135M's KV (45 KiB a token).
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 256 << 20;
pub const DEFAULT_PREFIX_CACHE_MIN_TOKENS: usize = 32;

impl PoolConfig {
    pub fn new(
        model_name: impl Into<String>,
        model_dir: PathBuf,
        runtime_library: PathBuf,
    ) -> Self {
        PoolConfig {
            model_name: model_name.into(),
            model_dir,
            runtime_library,
            execution_provider: ExecutionProvider::Cpu,
            workers: 1,
            threads_per_worker: 0,
            max_batch: 8,
            queue_capacity: 64,
            prefill_chunk: crate::engine::DEFAULT_PREFILL_CHUNK,
            prefix_cache_bytes: DEFAULT_PREFIX_CACHE_BYTES,
            prefix_cache_min_tokens: DEFAULT_PREFIX_CACHE_MIN_TOKENS,
            block_repeated_calls: true,
            adapters: crate::adapt::Adapters::default(),
        }
    }
}

/// Counters of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct PoolStats {
    pub queued: usize,
    pub active: usize,
    pub admitted: u64,
    pub refused: u64,
    /// Most rows decoded together in one step so far.
    pub peak_batch: usize,
    pub prefix_cache: PrefixStatsSnapshot,
}

enum PoolMsg {
    Submit(Box<Job>, RpcReplyPort<Result<()>>),
    Stats(RpcReplyPort<PoolStats>),
}

struct PoolActor;

struct PoolState {
    queue: Arc<WorkQueue>,
    prefix: Arc<PrefixStats>,
    admitted: u64,
    refused: u64,
}

impl Actor for PoolActor {
    type Msg = PoolMsg;
    type State = PoolState;
    type Arguments = (Arc<WorkQueue>, Arc<PrefixStats>);

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        (queue, prefix): Self::Arguments,
    ) -> std::result::Result<Self::State, ActorProcessingErr> {
        Ok(PoolState {
            queue,
            prefix,
            admitted: 0,
            refused: 0,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match message {
            PoolMsg::Submit(job, reply) => {
                let result = state.queue.push(*job);
                match &result {
                    Ok(()) => state.admitted += 1,
                    Err(_) => state.refused += 1,
                }
                let _ = reply.send(result);
            }
            PoolMsg::Stats(reply) => {
                let _ = reply.send(PoolStats {
                    queued: state.queue.len(),
                    active: state.queue.active.load(Ordering::Relaxed),
                    admitted: state.admitted,
                    refused: state.refused,
                    peak_batch: state.queue.peak_batch.load(Ordering::Relaxed),
                    prefix_cache: state.prefix.snapshot(),
                });
            }
        }
        Ok(())
    }
}

/// A running pool for one local model.
pub struct InferencePool {
    model_name: String,
    config: ModelConfig,
    /// See [`PoolConfig::block_repeated_calls`].
    block_repeated_calls: bool,
    adapters: crate::adapt::Adapters,
    template: ChatTemplate,
    shared: Arc<ModelShared>,
    queue: Arc<WorkQueue>,
    prefix: Arc<PrefixStats>,
    actor: ActorRef<PoolMsg>,
    workers: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Whether the sessions run on CUDA.
    pub on_cuda: bool,
}

static POOL_IDS: AtomicU64 = AtomicU64::new(0);

impl InferencePool {
    /// Loads the model (once per worker) and starts the workers and the pool actor.
    pub async fn start(config: PoolConfig) -> Result<Self> {
        let loading = config.clone();
        let prefix = Arc::new(PrefixStats::default());
        let stats = prefix.clone();
        let (model, engines, shared) = tokio::task::spawn_blocking(move || load(&loading, stats))
            .await
            .map_err(|e| Error::Runtime(format!("model loading panicked: {e}")))??;
        let on_cuda = engines.iter().any(|e| e.on_cuda);
        let template = ChatTemplate::new(
            &model.chat_template,
            &token_text(&shared.tokenizer, model.config.bos_token_id),
            &token_text(
                &shared.tokenizer,
                model.config.eos_token_ids.first().copied(),
            ),
        )
        .map_err(|e| match e {
            Error::ModelDir { message, .. } => Error::ModelDir {
                dir: model.path.display().to_string(),
                message,
            },
            other => other,
        })?;
        let queue = Arc::new(WorkQueue::new(config.queue_capacity));
        let mut workers = Vec::new();
        for (index, engine) in engines.into_iter().enumerate() {
            let shared = shared.clone();
            let worker_queue = queue.clone();
            let settings = WorkerSettings {
                max_batch: config.max_batch.max(1),
            };
            let spawned = std::thread::Builder::new()
                .name(format!("stead-engine-{index}"))
                .spawn(move || {
                    let guard_queue = worker_queue.clone();
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        run_worker(engine, shared, worker_queue, settings)
                    }));
                    if outcome.is_err() {
                        // A crashed worker must not leave callers waiting on a queue nobody
                        // serves: stop taking work and fail what is waiting.
                        tracing::error!("an engine worker crashed; the pool stops");
                        guard_queue.close();
                    }
                });
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    queue.close();
                    return Err(Error::Runtime(format!(
                        "cannot start an engine worker: {e}"
                    )));
                }
            }
        }
        let name = format!(
            "inference-pool-{}-{}",
            config.model_name,
            POOL_IDS.fetch_add(1, Ordering::Relaxed)
        );
        let (actor, _) =
            match Actor::spawn(Some(name), PoolActor, (queue.clone(), prefix.clone())).await {
                Ok(spawned) => spawned,
                Err(e) => {
                    queue.close();
                    return Err(Error::Runtime(format!("cannot start the pool actor: {e}")));
                }
            };
        Ok(InferencePool {
            model_name: config.model_name,
            block_repeated_calls: config.block_repeated_calls,
            adapters: config.adapters,
            config: model.config,
            template,
            shared,
            queue,
            prefix,
            actor,
            workers: std::sync::Mutex::new(workers),
            on_cuda,
        })
    }

    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    pub fn model_config(&self) -> &ModelConfig {
        &self.config
    }

    /// Starts a generation; the returned stream yields deltas and then the completion.
    pub async fn generate(&self, request: ChatRequest) -> Result<Generation> {
        let (events, receiver) = unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(AtomicUsize::new(0));
        let job = self.prepare(request, events, cancel.clone(), progress.clone())?;
        let answer = self
            .actor
            .call(|reply| PoolMsg::Submit(Box::new(job), reply), None)
            .await
            .map_err(|_| Error::ShutDown)?;
        match answer {
            ractor::rpc::CallResult::Success(result) => result?,
            _ => return Err(Error::ShutDown),
        }
        Ok(Generation {
            events: receiver,
            cancel,
            progress,
        })
    }

    /// The prompt `request` would be decoded from, as token ids: its conversation rendered with
    /// the model's chat template and tokenized (benchmarks hand it to peers, so that both sides
    /// start from the very same tokens).
    pub fn prompt_tokens(&self, request: ChatRequest) -> Result<Vec<u32>> {
        let (events, _) = unbounded_channel();
        let job = self.prepare(
            request,
            events,
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        )?;
        Ok(job.prompt)
    }

    /// Generates to the end and returns the completion.
    pub async fn complete(&self, request: ChatRequest) -> Result<Completion> {
        self.generate(request).await?.collect().await
    }

    /// The prefix cache's counters now (all zero, capacity 0, when it is off).
    pub fn prefix_stats(&self) -> PrefixStatsSnapshot {
        self.prefix.snapshot()
    }

    pub async fn stats(&self) -> PoolStats {
        match self.actor.call(PoolMsg::Stats, None).await {
            Ok(ractor::rpc::CallResult::Success(stats)) => stats,
            _ => PoolStats::default(),
        }
    }

    /// Refuses new work, lets running jobs finish, and stops the workers.
    pub async fn shutdown(&self) {
        self.queue.close();
        self.actor.stop(None);
        let workers =
            std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        let _ = tokio::task::spawn_blocking(move || {
            for worker in workers {
                let _ = worker.join();
            }
        })
        .await;
    }

    /// Validates, renders and tokenizes a request.
    fn prepare(
        &self,
        request: ChatRequest,
        events: tokio::sync::mpsc::UnboundedSender<StreamEvent>,
        cancel: Arc<AtomicBool>,
        progress: Arc<AtomicUsize>,
    ) -> Result<Job> {
        if !request.model.is_empty() && request.model != self.model_name {
            return Err(Error::UnknownModel(request.model));
        }
        if request.messages.is_empty() {
            return Err(Error::InvalidRequest("messages must not be empty".into()));
        }
        if request.sampling.max_tokens == 0 {
            return Err(Error::InvalidRequest(
                "max_tokens must be at least 1".into(),
            ));
        }
        crate::sampling::Sampler::new(&request.sampling)?;
        let small_talk = crate::small_talk::of_request(&request, self.adapters);
        let (tools, forced) = match &request.tool_choice {
            ToolChoice::None => (Vec::new(), None),
            ToolChoice::Auto if small_talk.is_some() => (Vec::new(), None),
            ToolChoice::Auto => (request.tools.clone(), None),
            ToolChoice::Required => {
                if request.tools.is_empty() {
                    return Err(Error::InvalidRequest(
                        "tool_choice \"required\" needs at least one tool".into(),
                    ));
                }
                (request.tools.clone(), Some(None))
            }
            ToolChoice::Function(name) => {
                if !request.tools.iter().any(|t| &t.name == name) {
                    return Err(Error::InvalidRequest(format!(
                        "tool_choice names `{name}`, which is not among the tools"
                    )));
                }
                (request.tools.clone(), Some(Some(name.clone())))
            }
        };
        self.shared.grammar.validate(&tools)?;
        let small_talk_messages = small_talk.map(|kind| {
            let digest = self.adapters.digest_history;
            crate::small_talk::adapt(&request.messages, kind, &request.tools, digest)
        });
        let (mut prompt, stops) = crate::adapt::render(
            &self.template,
            small_talk_messages.as_deref().unwrap_or(&request.messages),
            &tools,
            forced.is_none(),
            self.adapters,
        )?;
        let mut sampling = request.sampling;
        sampling.stop.extend(stops.iter().map(|s| s.to_string()));
        if forced.is_none() {
            prompt.push_str(&request.assistant_prefix);
        }
        let mode = match (&forced, tools.is_empty()) {
            (Some(only), _) => {
                prompt.push_str(TOOL_CALL_OPEN);
                ToolMode::Forced {
                    schema: ToolGrammar::call_schema(&tools, only.as_deref()),
                }
            }
            (None, false) => ToolMode::Auto {
                schema: ToolGrammar::call_schema(&tools, None),
                names: tools.iter().map(|t| t.name.clone()).collect(),
                answered: if self.block_repeated_calls {
                    crate::constrained::answered_calls(&request.messages)
                } else {
                    Vec::new()
                },
            },
            (None, true) => ToolMode::None,
        };
        let encoding = self
            .shared
            .tokenizer
            .encode(prompt.as_str(), false)
            .map_err(|e| Error::InvalidRequest(format!("cannot tokenize the prompt: {e}")))?;
        let prompt_tokens: Vec<u32> = encoding.get_ids().to_vec();
        let context = self.config.context_length;
        if prompt_tokens
            .len()
            .checked_add(sampling.max_tokens)
            .is_none_or(|total| total > context)
        {
            return Err(Error::ContextOverflow {
                prompt_tokens: prompt_tokens.len(),
                max_tokens: sampling.max_tokens,
                context,
            });
        }
        Ok(Job {
            model: self.model_name.clone(),
            prompt: prompt_tokens,
            sampling,
            tools: mode,
            events,
            cancel,
            progress,
            submitted: Instant::now(),
        })
    }
}

fn load(
    config: &PoolConfig,
    prefix_stats: Arc<PrefixStats>,
) -> Result<(ModelDir, Vec<Engine>, Arc<ModelShared>)> {
    let model = ModelDir::open(&config.model_dir)?;
    let env = init_runtime(&config.runtime_library)?;
    let workers = config.workers.max(1);
    let threads = match config.threads_per_worker {
        0 => (physical_cores() / workers).max(1),
        n => n,
    };
    let engines = (0..workers)
        .map(|_| {
            let mut engine = Engine::load(&env, &model, threads, config.execution_provider)?;
            engine.prefill_chunk = config.prefill_chunk.max(1);
            Ok(engine)
        })
        .collect::<Result<Vec<_>>>()?;
    let tokenizer = Tokenizer::from_file(model.tokenizer_path()).map_err(|e| Error::ModelDir {
        dir: model.path.display().to_string(),
        message: format!("tokenizer.json: {e}"),
    })?;
    let grammar = ToolGrammar::new(
        &model.tokenizer_path(),
        &model.config.eos_token_ids,
        model.config.vocab_size,
    )?;
    let prefix = match (config.prefix_cache_bytes, engines.first()) {
        (0, _) | (_, None) => None,
        (bytes, Some(engine)) => Some(std::sync::Mutex::new(PrefixCache::new(
            bytes,
            config.prefix_cache_min_tokens,
            engine.kv_shape(),
            prefix_stats,
        ))),
    };
    let call_opener = tokenizer
        .encode(TOOL_CALL_OPEN, false)
        .map_err(|e| Error::ModelDir {
            dir: model.path.display().to_string(),
            message: format!("cannot tokenize {TOOL_CALL_OPEN}: {e}"),
        })?
        .get_ids()
        .to_vec();
    let json_openers = crate::constrained::json_openers(&tokenizer);
    let shared = Arc::new(ModelShared {
        tokenizer,
        grammar,
        eos_ids: model.config.eos_token_ids.clone(),
        call_opener,
        json_openers,
        prefix,
    });
    Ok((model, engines, shared))
}

fn token_text(tokenizer: &Tokenizer, id: Option<u32>) -> String {
    id.and_then(|id| tokenizer.id_to_token(id))
        .unwrap_or_default()
}

/// Physical cores (not hyper-threads): intra-op threads beyond them slow ONNX Runtime down.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return logical;
    };
    let mut cores = std::collections::HashSet::new();
    let mut physical = "";
    for line in info.lines() {
        if let Some(v) = line.strip_prefix("physical id") {
            physical = v.trim_start_matches([' ', '\t', ':']);
        } else if let Some(v) = line.strip_prefix("core id") {
            cores.insert((
                physical.to_string(),
                v.trim_start_matches([' ', '\t', ':']).to_string(),
            ));
        }
    }
    if cores.is_empty() {
        logical
    } else {
        cores.len().min(logical)
    }
}

impl Drop for InferencePool {
    /// A pool dropped without `shutdown` still stops its workers (they exit at their next step).
    fn drop(&mut self) {
        self.queue.close();
        self.actor.stop(None);
    }
}

/// A running generation. Dropping it cancels the job.
pub struct Generation {
    events: UnboundedReceiver<StreamEvent>,
    cancel: Arc<AtomicBool>,
    progress: Arc<AtomicUsize>,
}

/// Cancels a generation from elsewhere.
#[derive(Clone)]
pub struct CancelHandle(Arc<AtomicBool>);

impl CancelHandle {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Generation {
    /// The next event; `None` after `Done` or `Failed`.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        self.events.recv().await
    }

    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// Tokens the engine has generated so far (it may be ahead of the events read).
    pub fn tokens_generated(&self) -> usize {
        self.progress.load(Ordering::Relaxed)
    }

    pub fn cancel_handle(&self) -> CancelHandle {
        CancelHandle(self.cancel.clone())
    }

    /// Waits for the end, ignoring deltas.
    pub async fn collect(mut self) -> Result<Completion> {
        while let Some(event) = self.next().await {
            match event {
                StreamEvent::Delta(_) => {}
                StreamEvent::Done(completion) => return Ok(completion),
                StreamEvent::Failed(error) => return Err(error),
            }
        }
        Err(Error::ShutDown)
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

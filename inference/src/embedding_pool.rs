//! The pooled embedding engine: one worker thread owns an [`Embedder`] and runs the texts of
//! every request waiting in its queue together, up to `max_batch` texts a run, so that many
//! small requests (a query each) cost one model run instead of many. A full queue refuses at
//! once ([`Error::Overloaded`]); a request's texts are never split across runs from other
//! requests' failures — each run answers its requests or fails them with its error.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::embedding::Embedder;
use crate::{Error, Result};

/// How an embedding pool runs.
#[derive(Debug, Clone)]
pub struct EmbeddingPoolConfig {
    pub model_dir: PathBuf,
    pub runtime_library: PathBuf,
    /// Intra-op threads of the worker; 0 = the machine's cores.
    pub threads: usize,
    /// Most texts one model run takes.
    pub max_batch: usize,
    /// Most requests waiting before new ones are refused.
    pub queue_capacity: usize,
}

impl EmbeddingPoolConfig {
    pub fn new(model_dir: PathBuf, runtime_library: PathBuf) -> Self {
        EmbeddingPoolConfig {
            model_dir,
            runtime_library,
            threads: 0,
            max_batch: 32,
            queue_capacity: 256,
        }
    }
}

struct Job {
    texts: Vec<String>,
    reply: oneshot::Sender<Result<Embedded>>,
}

/// A request's embeddings and the tokens the model was given for them.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    pub tokens: usize,
}

/// A running embedding engine; cheap to share behind an `Arc`.
pub struct EmbeddingPool {
    jobs: mpsc::Sender<Job>,
    queued: Arc<AtomicUsize>,
    capacity: usize,
    dimension: usize,
    /// Model runs and texts embedded so far (for `/metrics` and the benchmark).
    runs: Arc<AtomicUsize>,
    texts: Arc<AtomicUsize>,
}

impl EmbeddingPool {
    /// Loads the model on a worker thread of its own and starts it.
    pub async fn start(config: EmbeddingPoolConfig) -> Result<EmbeddingPool> {
        let (jobs, mut queue) = mpsc::channel::<Job>(config.queue_capacity.max(1));
        let (ready_tx, ready_rx) = oneshot::channel::<Result<usize>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let texts = Arc::new(AtomicUsize::new(0));
        let (worker_queued, worker_runs, worker_texts) =
            (queued.clone(), runs.clone(), texts.clone());
        let max_batch = config.max_batch.max(1);
        std::thread::Builder::new()
            .name("stead-embedding".into())
            .spawn(move || {
                let threads = crate::engine::threads_or_cores(config.threads);
                let loaded = crate::engine::init_runtime(&config.runtime_library)
                    .and_then(|env| Embedder::load(&env, &config.model_dir, threads));
                let mut embedder = match loaded {
                    Ok(embedder) => {
                        let _ = ready_tx.send(Ok(embedder.dimension()));
                        embedder
                    }
                    Err(error) => {
                        let _ = ready_tx.send(Err(error));
                        return;
                    }
                };
                while let Some(first) = queue.blocking_recv() {
                    // Everything already waiting joins the run, up to `max_batch` texts.
                    let mut batch = vec![first];
                    let mut count = batch[0].texts.len();
                    while count < max_batch {
                        match queue.try_recv() {
                            Ok(job) => {
                                count += job.texts.len();
                                batch.push(job);
                            }
                            Err(_) => break,
                        }
                    }
                    worker_queued.fetch_sub(batch.len(), Ordering::Relaxed);
                    let all: Vec<&str> = batch
                        .iter()
                        .flat_map(|job| job.texts.iter().map(String::as_str))
                        .collect();
                    // One request larger than a run is embedded in runs of `max_batch`.
                    let mut vectors = Vec::with_capacity(all.len());
                    let mut failed = None;
                    for chunk in all.chunks(max_batch) {
                        worker_runs.fetch_add(1, Ordering::Relaxed);
                        match embedder.embed_counted(chunk) {
                            Ok((out, tokens)) => {
                                vectors.extend(out.into_iter().zip(tokens.iter().copied()))
                            }
                            Err(error) => {
                                failed = Some(error.to_string());
                                break;
                            }
                        }
                    }
                    worker_texts.fetch_add(all.len(), Ordering::Relaxed);
                    let mut vectors = vectors.into_iter();
                    for job in batch {
                        let answer = match &failed {
                            Some(message) => Err(Error::Inference(message.clone())),
                            None => {
                                let (vectors, tokens): (Vec<Vec<f32>>, Vec<usize>) =
                                    vectors.by_ref().take(job.texts.len()).unzip();
                                Ok(Embedded {
                                    vectors,
                                    tokens: tokens.iter().sum(),
                                })
                            }
                        };
                        let _ = job.reply.send(answer);
                    }
                }
            })
            .map_err(|e| Error::Runtime(format!("cannot start the embedding worker: {e}")))?;
        let dimension = ready_rx
            .await
            .map_err(|_| Error::Runtime("the embedding worker stopped while loading".into()))??;
        Ok(EmbeddingPool {
            jobs,
            queued,
            capacity: config.queue_capacity.max(1),
            dimension,
            runs,
            texts,
        })
    }

    /// Floats per embedding.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// (model runs, texts embedded) so far.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.runs.load(Ordering::Relaxed),
            self.texts.load(Ordering::Relaxed),
        )
    }

    /// One unit-length embedding per text, in order.
    pub async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        Ok(self.embed_counted(texts).await?.vectors)
    }

    /// [`EmbeddingPool::embed`], and the tokens the model was given.
    pub async fn embed_counted(&self, texts: Vec<String>) -> Result<Embedded> {
        if texts.is_empty() {
            return Ok(Embedded {
                vectors: Vec::new(),
                tokens: 0,
            });
        }
        let (reply, answer) = oneshot::channel();
        let queued = self.queued.fetch_add(1, Ordering::Relaxed);
        if queued >= self.capacity {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Overloaded { queued });
        }
        if self.jobs.try_send(Job { texts, reply }).is_err() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Overloaded { queued });
        }
        answer
            .await
            .map_err(|_| Error::Runtime("the embedding worker stopped".into()))?
    }
}

//! The pooled embedding engine: one worker thread owns the model's sessions and runs the texts
//! of every request waiting in its queue together, up to `max_batch` texts a run, so that many
//! small requests (a query each) cost one model run instead of many. The texts taken together
//! are sorted by length and cut into model runs of a few texts each (at most [`PART_TOKENS`]
//! padded tokens: small runs pad little and keep their activations in cache), which the
//! sessions (`workers`, each on its own thread) take in turn (docs/inference.md,
//! "Embeddings"). A full queue refuses at
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
    /// Model sessions a run is split across (at least 1).
    pub workers: usize,
    /// Intra-op threads of each session; 0 = the machine's cores ÷ `workers`.
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
            workers: 1,
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
                let workers = config.workers.max(1);
                let threads = match config.threads {
                    0 => (crate::engine::threads_or_cores(0) / workers).max(1),
                    threads => threads,
                };
                let loaded = crate::engine::init_runtime(&config.runtime_library).and_then(|env| {
                    (0..workers)
                        .map(|_| Embedder::load(&env, &config.model_dir, threads))
                        .collect::<Result<Vec<_>>>()
                });
                let mut embedders = match loaded {
                    Ok(embedders) => {
                        let _ = ready_tx.send(Ok(embedders[0].dimension()));
                        embedders
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
                        match run_split(&mut embedders, chunk) {
                            Ok(out) => vectors.extend(out),
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

/// Padded tokens (texts × the longest) one model run is given at most, unless a single text is
/// longer: measured on this model, a run of ~8 texts of ~86 tokens embeds 1.27× the texts per
/// second of a run of 32 (its activations stay in cache), on either one session with two
/// threads or two sessions with one (docs/inference.md, "Embeddings").
const PART_TOKENS: usize = 768;

/// A run's index among the parts and its vectors.
type RunDone = (usize, Vec<Vec<f32>>);

/// One request's texts through `embedders`: tokenized once, sorted by length, cut into parts
/// of at most [`PART_TOKENS`] padded tokens, and the parts run by the sessions side by side,
/// each session taking the next part when it is free. Each text's vector and tokens, in order.
fn run_split(embedders: &mut [Embedder], texts: &[&str]) -> Result<Vec<(Vec<f32>, usize)>> {
    let Some((first, others)) = embedders.split_first_mut() else {
        return Err(Error::Runtime("the embedding pool has no session".into()));
    };
    let encodings = first.encode(texts)?;
    let tokens: Vec<usize> = encodings.iter().map(tokenizers::Encoding::len).collect();
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|&i| tokens[i]);
    let parts = cut(&order, &tokens, PART_TOKENS);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let take_parts = |embedder: &mut Embedder| -> Result<Vec<RunDone>> {
        let mut done = Vec::new();
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let Some(part) = parts.get(index) else {
                return Ok(done);
            };
            let inputs: Vec<&tokenizers::Encoding> = part.iter().map(|&i| &encodings[i]).collect();
            done.push((index, embedder.run(&inputs)?));
        }
    };
    let take_parts = &take_parts;
    let helpers = others.len().min(parts.len().saturating_sub(1));
    let results: Vec<Result<Vec<RunDone>>> =
        std::thread::scope(|scope| {
            let running: Vec<_> = others[..helpers]
                .iter_mut()
                .map(|embedder| scope.spawn(move || take_parts(embedder)))
                .collect();
            let mut results = vec![take_parts(first)];
            for handle in running {
                results.push(handle.join().unwrap_or_else(|_| {
                    Err(Error::Runtime("an embedding session panicked".into()))
                }));
            }
            results
        });
    let mut out: Vec<(Vec<f32>, usize)> = tokens.iter().map(|&t| (Vec::new(), t)).collect();
    for result in results {
        for (index, vectors) in result? {
            for (&text, vector) in parts[index].iter().zip(vectors) {
                out[text].0 = vector;
            }
        }
    }
    Ok(out)
}

/// Cuts `order` (indices sorted by their `tokens`, ascending) into runs whose padded tokens
/// (texts × the longest) stay within `budget`; a text longer than the budget runs alone.
fn cut<'a>(order: &'a [usize], tokens: &[usize], budget: usize) -> Vec<&'a [usize]> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (position, &index) in order.iter().enumerate() {
        let count = position - start + 1;
        if count > 1 && count * tokens[index] > budget {
            parts.push(&order[start..position]);
            start = position;
        }
    }
    if start < order.len() {
        parts.push(&order[start..]);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn runs_stay_within_the_padded_token_budget() {
        let order: Vec<usize> = (0..6).collect();
        let tokens = [10, 10, 10, 10, 40, 40];
        // 4 × 10 fits 40; a fifth text would pad all five to 40.
        assert_eq!(
            cut(&order, &tokens, 40),
            vec![&[0, 1, 2, 3][..], &[4], &[5]]
        );
        assert_eq!(cut(&order, &tokens, 80), vec![&[0, 1, 2, 3][..], &[4, 5]]);
        assert_eq!(cut(&order, &tokens, 1000), vec![&[0, 1, 2, 3, 4, 5][..]]);
        // A text longer than the budget runs alone; nothing is empty.
        assert_eq!(cut(&[1, 0], &[500, 3], 100), vec![&[1][..], &[0]]);
        assert!(cut(&[], &tokens, 100).is_empty());
    }
}

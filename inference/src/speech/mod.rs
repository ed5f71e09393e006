//! Speech to text on the local engine (docs/speech.md): Whisper in ONNX ([`whisper`]), its
//! log-mel input ([`mel`]), audio files decoded to 16 kHz mono ([`audio`]), and the pool the
//! server transcribes through — one worker thread owning the model, requests taken in turn
//! from a bounded queue (a full queue refuses at once with [`Error::Overloaded`]).

pub mod audio;
pub mod mel;
pub mod wer;
pub mod whisper;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

pub use whisper::{Segment, Transcript, Whisper, WhisperConfig};

use crate::{Error, Result};

/// The local speech model `stead setup` prepares, by its directory name under `models/`.
pub const DEFAULT_SPEECH_MODEL: &str = "whisper-tiny.en";

/// How a speech pool runs.
#[derive(Debug, Clone)]
pub struct SpeechPoolConfig {
    pub model_dir: PathBuf,
    pub runtime_library: PathBuf,
    /// Intra-op threads of the worker; 0 = the machine's cores.
    pub threads: usize,
    /// Most requests waiting before new ones are refused.
    pub queue_capacity: usize,
}

impl SpeechPoolConfig {
    pub fn new(model_dir: PathBuf, runtime_library: PathBuf) -> Self {
        SpeechPoolConfig {
            model_dir,
            runtime_library,
            threads: 0,
            queue_capacity: 16,
        }
    }
}

struct Job {
    samples: Vec<f32>,
    reply: oneshot::Sender<Result<Transcript>>,
}

/// A running speech model; cheap to share behind an `Arc`.
pub struct SpeechPool {
    jobs: mpsc::Sender<Job>,
    queued: Arc<AtomicUsize>,
    capacity: usize,
    config: WhisperConfig,
}

impl SpeechPool {
    /// Loads the model on a worker thread of its own and starts it.
    pub async fn start(config: SpeechPoolConfig) -> Result<SpeechPool> {
        let capacity = config.queue_capacity.max(1);
        let (jobs, mut queue) = mpsc::channel::<Job>(capacity);
        let (ready_tx, ready_rx) = oneshot::channel::<Result<WhisperConfig>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let worker_queued = queued.clone();
        std::thread::Builder::new()
            .name("stead-speech".into())
            .spawn(move || {
                let threads = crate::engine::threads_or_cores(config.threads);
                let loaded = crate::engine::init_runtime(&config.runtime_library)
                    .and_then(|env| Whisper::load(&env, &config.model_dir, threads));
                let mut model = match loaded {
                    Ok(model) => {
                        let _ = ready_tx.send(Ok(model.config().clone()));
                        model
                    }
                    Err(error) => {
                        let _ = ready_tx.send(Err(error));
                        return;
                    }
                };
                while let Some(job) = queue.blocking_recv() {
                    worker_queued.fetch_sub(1, Ordering::Relaxed);
                    let _ = job.reply.send(model.transcribe(&job.samples));
                }
            })
            .map_err(|e| Error::Runtime(format!("cannot start the speech worker: {e}")))?;
        let config = ready_rx
            .await
            .map_err(|_| Error::Runtime("the speech worker stopped while loading".into()))??;
        Ok(SpeechPool {
            jobs,
            queued,
            capacity,
            config,
        })
    }

    /// The model's description (its name, whether it knows English only).
    pub fn model(&self) -> &WhisperConfig {
        &self.config
    }

    /// Transcribes 16 kHz mono samples ([`audio::decode`] makes them from a file).
    pub async fn transcribe(&self, samples: Vec<f32>) -> Result<Transcript> {
        let (reply, answer) = oneshot::channel();
        let queued = self.queued.fetch_add(1, Ordering::Relaxed);
        if queued >= self.capacity || self.jobs.try_send(Job { samples, reply }).is_err() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Overloaded { queued });
        }
        answer
            .await
            .map_err(|_| Error::Runtime("the speech worker stopped".into()))?
    }
}

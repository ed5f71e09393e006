//! The request log: one record per model call, written in batches by a background task so a
//! call never waits on storage. Where records go is a [`RequestLogSink`] (the binary connects it
//! to the database); when the queue is full, records are dropped and counted rather than slowing
//! calls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::config::RequestLogConfig;

pub use stead_model::log::{AttemptRecord, LogStatus, RequestLogEntry};

/// Where batches of records are written.
#[async_trait]
pub trait RequestLogSink: Send + Sync + 'static {
    async fn write(&self, records: Vec<RequestLogEntry>) -> Result<(), SinkError>;
}

/// A batch the sink could not write (it is dropped and counted; the message is logged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkError(pub String);

impl std::fmt::Display for SinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SinkError {}

/// The queue in front of a sink.
pub struct RequestLog {
    sender: mpsc::Sender<RequestLogEntry>,
    flushes: mpsc::UnboundedSender<tokio::sync::oneshot::Sender<()>>,
    dropped: AtomicU64,
    written: Arc<AtomicU64>,
}

impl RequestLog {
    /// Starts the writer task (inside a tokio runtime).
    pub fn start(sink: Arc<dyn RequestLogSink>, config: &RequestLogConfig) -> Self {
        let (sender, mut receiver) = mpsc::channel::<RequestLogEntry>(config.queue);
        let (flushes, mut flush_requests) =
            mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<()>>();
        let batch_size = config.batch_size;
        let flush = Duration::from_millis(config.flush_ms.max(1));
        let written = Arc::new(AtomicU64::new(0));
        let counter = written.clone();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(batch_size);
            loop {
                // Wait for the first record, then gather more until the batch is full or the
                // flush interval has passed. A flush request writes what is queued at once and
                // is answered after it is written.
                let mut waiting = Vec::new();
                tokio::select! {
                    record = receiver.recv() => match record {
                        Some(record) => batch.push(record),
                        None => break,
                    },
                    Some(ack) = flush_requests.recv() => waiting.push(ack),
                }
                while let Ok(record) = receiver.try_recv() {
                    batch.push(record);
                }
                if batch.is_empty() {
                    for ack in waiting {
                        let _ = ack.send(());
                    }
                    continue;
                }
                let deadline = tokio::time::sleep(flush);
                tokio::pin!(deadline);
                while batch.len() < batch_size && waiting.is_empty() {
                    tokio::select! {
                        record = receiver.recv() => match record {
                            Some(record) => batch.push(record),
                            None => break,
                        },
                        _ = &mut deadline => break,
                    }
                }
                let records = std::mem::replace(&mut batch, Vec::with_capacity(batch_size));
                let n = records.len() as u64;
                // A batch's conversion and statement building take a few milliseconds: they run
                // on a blocking thread, which the OS time-slices, rather than on a runtime worker,
                // where they would delay every call queued behind them (measured: p99 added
                // latency under `stead bench gateway` about halved).
                let sink = sink.clone();
                let handle = tokio::runtime::Handle::current();
                let written =
                    tokio::task::spawn_blocking(move || handle.block_on(sink.write(records)))
                        .await
                        .unwrap_or_else(|e| {
                            Err(SinkError(format!("the log writer panicked: {e}")))
                        });
                match written {
                    Ok(()) => {
                        counter.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(error) => {
                        tracing::warn!(%error, rows = n, "writing the request log failed")
                    }
                }
                for ack in waiting {
                    let _ = ack.send(());
                }
            }
        });
        RequestLog {
            sender,
            flushes,
            dropped: AtomicU64::new(0),
            written,
        }
    }

    /// Queues a record; never waits.
    pub fn record(&self, record: RequestLogEntry) {
        if self.sender.try_send(record).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until every record queued before the call is written (or its write failed).
    pub async fn flush(&self) {
        let (ack, done) = tokio::sync::oneshot::channel();
        if self.flushes.send(ack).is_ok() {
            let _ = done.await;
        }
    }

    /// Records dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Records written.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
}

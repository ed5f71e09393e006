//! Group commit: one committer task per store turns concurrent appends into shared
//! transactions.
//!
//! Appends are queued on a bounded channel. The committer takes the first waiting request, then
//! everything else already queued (up to a batch limit), writes them all in one transaction, and
//! only after the commit returns answers each caller. There is no timer: under light load a
//! batch is one request and pays one commit; under heavy load requests pile up while the
//! previous commit runs, and the next commit carries all of them. After answering a batch the
//! committer yields to the scheduler (while the queue keeps growing, a few times at most), so
//! that the callers it just answered can queue their next appends before the next batch is cut:
//! without that, busy writers split into two cohorts that alternate, each commit carrying half
//! of them. "Acknowledged means durable" holds because no reply is sent before the commit that
//! carries it has returned.
//!
//! A committer may have several writers (PostgreSQL: two connections of the journal's own).
//! While one batch is being written, the next is cut from what has queued and written by an
//! idle writer, so the database is not idle while answered callers queue their next appends.
//! An append whose session has an earlier append in a batch being written waits for that
//! batch (held, in order), so each session's appends still commit in order, and batches
//! written at the same time never touch the same session.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use stead_model::Epoch;

use crate::{prepare_payload, Error, NewEvent, Result};

/// An event ready to write: payload serialized and checked, timestamp fixed.
#[derive(Debug)]
pub struct PreparedEvent {
    pub kind: String,
    pub payload: String,
    pub created_at: DateTime<Utc>,
}

/// One caller's append, waiting for its commit.
#[derive(Debug)]
pub struct AppendRequest {
    pub session_id: Uuid,
    pub expected_last_seq: i64,
    /// When set, the session's lease epoch must equal it.
    pub epoch: Option<Epoch>,
    /// When set, the session's status after this append (written with it).
    pub status: Option<crate::SessionStatus>,
    pub events: Vec<PreparedEvent>,
    reply: oneshot::Sender<Result<Vec<i64>>>,
}

/// What happened to one request of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Written with seqs `expected_last_seq + 1 ..= expected_last_seq + events.len()`.
    Appended,
    /// Not written: the session's last seq was `actual`.
    Conflict { actual: i64 },
    /// Not written: the session's lease epoch was `current`, not the request's.
    Fenced { current: Epoch },
    /// Not written: no such session.
    NotFound,
}

/// A backend's way of writing one batch in one transaction.
#[async_trait]
pub trait BatchWriter: Send + 'static {
    /// Writes every request that its fencing check admits, in order, in one transaction, and
    /// returns the batch with one outcome per request. The batch is lent by value so that a
    /// writer may hand it to a thread of its own.
    ///
    /// # Invariant
    /// Requests for the same session are applied in batch order, each checked against the state
    /// the earlier ones left. `Err` means the transaction did not commit: nothing was written.
    /// The batch comes back whole (an empty one only when the writer lost it, with `Err`).
    async fn write_batch(
        &mut self,
        batch: Vec<AppendRequest>,
    ) -> (Vec<AppendRequest>, Result<Vec<Outcome>>);
}

/// Counters of a committer since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Transactions committed (one per batch).
    pub commits: u64,
    /// Append calls that were committed.
    pub appends: u64,
    /// Events committed.
    pub events: u64,
}

#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    appends: AtomicU64,
    events: AtomicU64,
}

/// The callers' side of a committer.
pub struct GroupCommit {
    counters: Arc<Counters>,
    sender: std::sync::Mutex<Option<mpsc::Sender<AppendRequest>>>,
    committer: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    max_event_bytes: usize,
}

impl GroupCommit {
    /// Starts the committer task for `writer`.
    pub fn start<W: BatchWriter>(
        writer: W,
        max_event_bytes: usize,
        max_batch_events: usize,
    ) -> Self {
        Self::start_pipelined(vec![writer], max_event_bytes, max_batch_events)
    }

    /// Starts the committer task with several writers: while one batch is being written, the
    /// next is cut from what has queued and written by another writer (its own connection),
    /// so the database is not idle while answered callers queue their next appends. A
    /// session's appends still commit in order: an append waits while an earlier one of its
    /// session is in a batch being written. No writer: none is started, and every append
    /// fails as shut down.
    pub fn start_pipelined<W: BatchWriter>(
        writers: Vec<W>,
        max_event_bytes: usize,
        max_batch_events: usize,
    ) -> Self {
        let (sender, receiver) = mpsc::channel(8192);
        let counters = Arc::new(Counters::default());
        let committer = tokio::spawn(run_committer(
            writers,
            receiver,
            max_batch_events.max(1),
            counters.clone(),
        ));
        GroupCommit {
            counters,
            sender: std::sync::Mutex::new(Some(sender)),
            committer: tokio::sync::Mutex::new(Some(committer)),
            max_event_bytes,
        }
    }

    /// Validates, queues and waits for the commit of one append.
    pub async fn append(
        &self,
        session_id: Uuid,
        expected_last_seq: i64,
        epoch: Option<Epoch>,
        status: Option<crate::SessionStatus>,
        events: Vec<NewEvent>,
    ) -> Result<Vec<i64>> {
        if events.is_empty() {
            return Err(Error::InvalidInput(
                "an append needs at least one event".into(),
            ));
        }
        if expected_last_seq < 0 {
            return Err(Error::InvalidInput(
                "expected_last_seq must not be negative".into(),
            ));
        }
        let events = events
            .iter()
            .map(|event| {
                Ok(PreparedEvent {
                    payload: prepare_payload(&event.kind, &event.payload, self.max_event_bytes)?,
                    kind: event.kind.clone(),
                    created_at: event.created_at,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let sender = self
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(Error::ShutDown)?;
        let (reply, answer) = oneshot::channel();
        sender
            .send(AppendRequest {
                session_id,
                expected_last_seq,
                epoch,
                status,
                events,
                reply,
            })
            .await
            .map_err(|_| Error::ShutDown)?;
        answer.await.map_err(|_| Error::ShutDown)?
    }

    pub fn stats(&self) -> JournalStats {
        JournalStats {
            commits: self.counters.commits.load(Ordering::Relaxed),
            appends: self.counters.appends.load(Ordering::Relaxed),
            events: self.counters.events.load(Ordering::Relaxed),
        }
    }

    /// Stops taking appends and waits until every queued one has been committed and answered.
    pub async fn shutdown(&self) {
        self.sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(committer) = self.committer.lock().await.take() {
            let _ = committer.await;
        }
    }
}

/// A batch being written, with the writer writing it.
type Flight<W> =
    Pin<Box<dyn Future<Output = (W, Vec<AppendRequest>, Result<Vec<Outcome>>)> + Send>>;

async fn run_committer<W: BatchWriter>(
    mut idle: Vec<W>,
    mut receiver: mpsc::Receiver<AppendRequest>,
    max_batch_events: usize,
    counters: Arc<Counters>,
) {
    if idle.is_empty() {
        return;
    }
    let mut flights: FuturesUnordered<Flight<W>> = FuturesUnordered::new();
    let mut queue = crate::commit_queue::Queue::default();
    let mut open = true;
    loop {
        // A batch for every idle writer while there is work it may take.
        while let Some(mut writer) = idle.pop() {
            let batch = queue.cut(&mut receiver, max_batch_events);
            if batch.is_empty() {
                idle.push(writer);
                break;
            }
            queue.writing(&batch, true);
            flights.push(Box::pin(async move {
                let (batch, result) = writer.write_batch(batch).await;
                (writer, batch, result)
            }));
        }
        if flights.is_empty() {
            // Nothing is being written, so nothing is held back: wait for the next append.
            match receiver.recv().await {
                Some(request) if open => queue.held.push_back(request),
                _ => break,
            }
            continue;
        }
        tokio::select! {
            Some((writer, mut batch, result)) = flights.next() => {
                queue.writing(&batch, false);
                if let Ok(outcomes) = &result {
                    counters.commits.fetch_add(1, Ordering::Relaxed);
                    for (request, outcome) in batch.iter().zip(outcomes) {
                        if *outcome == Outcome::Appended {
                            counters.appends.fetch_add(1, Ordering::Relaxed);
                            counters
                                .events
                                .fetch_add(request.events.len() as u64, Ordering::Relaxed);
                        }
                    }
                }
                answer(&mut batch, result);
                idle.push(writer);
                let_answered_callers_queue(&receiver).await;
            }
            request = receiver.recv(), if open && !idle.is_empty() => match request {
                Some(request) => queue.held.push_back(request),
                None => open = false,
            },
        }
    }
}

/// Yields while the queue keeps growing (at most a few times): the tasks woken by the answers
/// run and queue their next appends, and join the next batch instead of the one after it.
/// Costs one yield when nobody is coming.
async fn let_answered_callers_queue(receiver: &mpsc::Receiver<AppendRequest>) {
    let mut queued = receiver.len();
    for _ in 0..4 {
        tokio::task::yield_now().await;
        let now = receiver.len();
        if now == queued {
            break;
        }
        queued = now;
    }
}

fn answer(batch: &mut Vec<AppendRequest>, result: Result<Vec<Outcome>>) {
    match result {
        Ok(outcomes) => {
            debug_assert_eq!(outcomes.len(), batch.len());
            for (request, outcome) in batch.drain(..).zip(outcomes) {
                let answer = match outcome {
                    Outcome::Appended => {
                        let first = request.expected_last_seq + 1;
                        Ok((first..first + request.events.len() as i64).collect())
                    }
                    Outcome::Conflict { actual } => Err(Error::Conflict {
                        session_id: request.session_id,
                        expected: request.expected_last_seq,
                        actual,
                    }),
                    Outcome::Fenced { current } => Err(Error::Fenced {
                        session_id: request.session_id,
                        held: request.epoch.unwrap_or_default(),
                        current,
                    }),
                    Outcome::NotFound => Err(Error::SessionNotFound(request.session_id)),
                };
                let _ = request.reply.send(answer);
            }
        }
        Err(error) => {
            tracing::error!(error = %error, requests = batch.len(), "journal group commit failed");
            let message = error.to_string();
            for request in batch.drain(..) {
                let _ = request
                    .reply
                    .send(Err(Error::CommitFailed(message.clone())));
            }
        }
    }
}

/// Marks the requests of `round` whose session is in `updated` (the ids a fenced update
/// returned) as appended, and queues the others in `rejected`.
pub fn admit(
    batch: &[AppendRequest],
    round: &[usize],
    updated: &HashSet<Uuid>,
    outcomes: &mut [Option<Outcome>],
    rejected: &mut Vec<usize>,
) {
    for &index in round {
        if updated.contains(&batch[index].session_id) {
            outcomes[index] = Some(Outcome::Appended);
        } else {
            rejected.push(index);
        }
    }
}

/// A batch's outcomes once a writer has given every request one.
///
/// # Panics
/// If a request was left without an outcome: a bug in the writer.
pub fn settled(outcomes: Vec<Option<Outcome>>) -> Vec<Outcome> {
    // Writers give every request an outcome: appended, or rejected after the fenced update.
    #[allow(clippy::expect_used)]
    outcomes
        .into_iter()
        .map(|o| o.expect("every request of a batch gets an outcome"))
        .collect()
}

/// Splits batch indices into rounds in which each session appears at most once, keeping the
/// batch order of each session's requests. Backends that write a round with one set-based
/// statement use this.
pub fn rounds(batch: &[AppendRequest]) -> Vec<Vec<usize>> {
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    let mut depth: std::collections::HashMap<Uuid, usize> = std::collections::HashMap::new();
    for (index, request) in batch.iter().enumerate() {
        let round = depth.entry(request.session_id).or_insert(0);
        if rounds.len() <= *round {
            rounds.push(Vec::new());
        }
        rounds[*round].push(index);
        *round += 1;
    }
    rounds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(session_id: Uuid) -> AppendRequest {
        AppendRequest {
            session_id,
            expected_last_seq: 0,
            epoch: None,
            status: None,
            events: Vec::new(),
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn rounds_hold_each_session_once_and_keep_its_order() {
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let batch: Vec<AppendRequest> = [a, b, a, c, a, b].into_iter().map(request).collect();
        assert_eq!(rounds(&batch), vec![vec![0, 1, 3], vec![2, 5], vec![4]]);
        assert!(rounds(&[]).is_empty());
    }

    /// A writer double that holds each batch for 3 ms and checks, against state shared by
    /// every writer, that each session's appends arrive in order and that no session is in
    /// two batches being written at once.
    #[derive(Default)]
    struct Ledger {
        last: std::collections::HashMap<Uuid, i64>,
        writing: HashSet<Uuid>,
        batches_now: usize,
        most_at_once: usize,
        violations: Vec<String>,
    }

    struct Slow(Arc<std::sync::Mutex<Ledger>>);

    #[async_trait]
    impl BatchWriter for Slow {
        async fn write_batch(
            &mut self,
            batch: Vec<AppendRequest>,
        ) -> (Vec<AppendRequest>, Result<Vec<Outcome>>) {
            let sessions: HashSet<Uuid> = batch.iter().map(|r| r.session_id).collect();
            {
                let mut ledger = self.0.lock().unwrap();
                if sessions.iter().any(|s| ledger.writing.contains(s)) {
                    ledger
                        .violations
                        .push("a session in two batches at once".into());
                }
                ledger.writing.extend(&sessions);
                ledger.batches_now += 1;
                ledger.most_at_once = ledger.most_at_once.max(ledger.batches_now);
                for request in &batch {
                    let last = ledger.last.get(&request.session_id).copied().unwrap_or(0);
                    if last != request.expected_last_seq {
                        let seen = format!("expected {} after {last}", request.expected_last_seq);
                        ledger.violations.push(seen);
                    }
                    let now = request.expected_last_seq + request.events.len() as i64;
                    ledger.last.insert(request.session_id, now);
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(3)).await;
            let mut ledger = self.0.lock().unwrap();
            ledger.batches_now -= 1;
            for session in &sessions {
                ledger.writing.remove(session);
            }
            let outcomes = vec![Outcome::Appended; batch.len()];
            (batch, Ok(outcomes))
        }
    }

    /// Two writers: batches are written two at a time, and a session's appends — the second
    /// sent while the first is being written, so it must wait — commit in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_writers_overlap_batches_and_keep_each_sessions_order() {
        let ledger = Arc::new(std::sync::Mutex::new(Ledger::default()));
        let writers = vec![Slow(ledger.clone()), Slow(ledger.clone())];
        let journal = Arc::new(GroupCommit::start_pipelined(writers, 1024, 64));
        let mut tasks = Vec::new();
        for _ in 0..24 {
            let journal = journal.clone();
            tasks.push(tokio::spawn(async move {
                let id = Uuid::now_v7();
                let one = || vec![NewEvent::new("k", serde_json::json!({}))];
                for step in 0..10 {
                    let at = step * 2;
                    // The second append follows while the first is (most likely) in flight.
                    let (a, b) = tokio::join!(journal.append(id, at, None, None, one()), async {
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                        journal.append(id, at + 1, None, None, one()).await
                    });
                    assert_eq!((a.unwrap(), b.unwrap()), (vec![at + 1], vec![at + 2]));
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let stats = journal.stats();
        journal.shutdown().await;
        let ledger = ledger.lock().unwrap();
        assert_eq!(ledger.violations, Vec::<String>::new());
        assert_eq!(ledger.most_at_once, 2, "batches were written two at a time");
        assert_eq!(ledger.last.len(), 24);
        assert!(ledger.last.values().all(|&last| last == 20));
        assert_eq!((stats.appends, stats.events), (480, 480));
    }

    #[tokio::test]
    async fn answers_follow_outcomes_and_failures_fail_every_request() {
        struct Scripted(Vec<Result<Vec<Outcome>>>);
        #[async_trait]
        impl BatchWriter for Scripted {
            async fn write_batch(
                &mut self,
                batch: Vec<AppendRequest>,
            ) -> (Vec<AppendRequest>, Result<Vec<Outcome>>) {
                let next = self.0.remove(0);
                if let Ok(outcomes) = &next {
                    assert_eq!(outcomes.len(), batch.len());
                }
                (batch, next)
            }
        }
        let writer = Scripted(vec![
            Ok(vec![Outcome::Appended]),
            Ok(vec![Outcome::Conflict { actual: 7 }]),
            Ok(vec![Outcome::NotFound]),
            Err(Error::CommitFailed("disk full".into())),
        ]);
        let journal = GroupCommit::start(writer, 1024, 16);
        let id = Uuid::now_v7();
        let event = || {
            vec![
                NewEvent::new("k", serde_json::json!({})),
                NewEvent::new("k", serde_json::json!(1)),
            ]
        };
        assert_eq!(
            journal.append(id, 4, None, None, event()).await.unwrap(),
            vec![5, 6]
        );
        assert!(matches!(
            journal.append(id, 4, None, None, event()).await,
            Err(Error::Conflict {
                expected: 4,
                actual: 7,
                ..
            })
        ));
        assert!(matches!(
            journal.append(id, 0, None, None, event()).await,
            Err(Error::SessionNotFound(_))
        ));
        assert!(matches!(
            journal.append(id, 0, None, None, event()).await,
            Err(Error::CommitFailed(_))
        ));
        let stats = journal.stats();
        assert_eq!((stats.commits, stats.appends, stats.events), (3, 1, 2));
        journal.shutdown().await;
        assert!(matches!(
            journal.append(id, 0, None, None, event()).await,
            Err(Error::ShutDown)
        ));
    }
}

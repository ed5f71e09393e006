//! The committer's queue when batches are written side by side (`group_commit`): appends
//! taken off the channel but not yet in a batch, held back while an earlier append of their
//! session is in a batch being written, so that each session's appends commit in order.

use std::collections::{HashMap, HashSet, VecDeque};

use tokio::sync::mpsc;
use uuid::Uuid;

use crate::group_commit::AppendRequest;

/// The appends taken off the channel but not yet in a batch, and the sessions that have an
/// append in a batch being written.
#[derive(Default)]
pub(crate) struct Queue {
    /// Oldest first; each waits for no earlier append of its session to be in flight.
    pub(crate) held: VecDeque<AppendRequest>,
    /// Appends in flight per session.
    in_flight: HashMap<Uuid, usize>,
}

impl Queue {
    /// The next batch: the held appends, then the channel's, in order, up to
    /// `max_batch_events` events — leaving behind (held, in order) every append whose session
    /// has one in flight or left behind already, so that a session's appends commit in order.
    pub(crate) fn cut(
        &mut self,
        receiver: &mut mpsc::Receiver<AppendRequest>,
        max_batch_events: usize,
    ) -> Vec<AppendRequest> {
        let mut cut = Cut {
            max_batch_events,
            ..Cut::default()
        };
        for request in std::mem::take(&mut self.held) {
            cut.offer(request, &self.in_flight);
        }
        while cut.events < max_batch_events {
            match receiver.try_recv() {
                Ok(request) => cut.offer(request, &self.in_flight),
                Err(_) => break,
            }
        }
        self.held = cut.kept;
        cut.batch
    }

    /// Marks a batch's sessions as in flight (`true`) or no longer (`false`).
    pub(crate) fn writing(&mut self, batch: &[AppendRequest], started: bool) {
        for request in batch {
            if started {
                *self.in_flight.entry(request.session_id).or_default() += 1;
            } else if let Some(count) = self.in_flight.get_mut(&request.session_id) {
                *count -= 1;
                if *count == 0 {
                    self.in_flight.remove(&request.session_id);
                }
            }
        }
    }
}

/// A batch being cut.
#[derive(Default)]
struct Cut {
    max_batch_events: usize,
    batch: Vec<AppendRequest>,
    events: usize,
    /// Sessions with an append left behind: their later appends stay behind it.
    behind: HashSet<Uuid>,
    kept: VecDeque<AppendRequest>,
}

impl Cut {
    fn offer(&mut self, request: AppendRequest, in_flight: &HashMap<Uuid, usize>) {
        let waits = in_flight.contains_key(&request.session_id)
            || self.behind.contains(&request.session_id);
        if waits || self.events >= self.max_batch_events {
            self.behind.insert(request.session_id);
            self.kept.push_back(request);
        } else {
            self.events += request.events.len();
            self.batch.push(request);
        }
    }
}

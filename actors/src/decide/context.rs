//! A prompt over its budget: the oldest whole turns compacted before the call is sent.

use crate::decide::{Action, Decision, Planner, Refusal};
use crate::events::{Compaction, SessionEvent};

impl Planner<'_> {
    /// A compaction for the model call in flight: journaled, then that call is issued again
    /// over the compacted transcript. Refused (stale) for any other call, for nothing to drop,
    /// or for more entries than the transcript holds.
    pub(crate) fn compact(mut self, compaction: Compaction) -> Result<Decision, Refusal> {
        let in_flight = self
            .state
            .turn
            .as_ref()
            .and_then(|t| t.model_call.as_deref());
        if in_flight != Some(compaction.call_id.as_str())
            || compaction.entries == 0
            || compaction.entries > self.state.transcript.len() as u64
        {
            return Err(Refusal::Stale);
        }
        let call_id = compaction.call_id.clone();
        self.push(SessionEvent::ContextCompacted(compaction));
        self.push_action(Action::CallModel { call_id });
        Ok(self.finish())
    }
}

//! Inputs to a session that has ended (failed or closed): it answers reads, starts nothing and
//! resumes nothing; only closing a failed session is still decided.

use super::{Decision, Input, Planner, Refusal};
use crate::events::SessionEvent;

impl Planner<'_> {
    /// `input` for an ended session.
    pub(super) fn ended(mut self, input: Input) -> Result<Decision, Refusal> {
        match input {
            Input::Recover => Ok(Decision::default()),
            Input::Close { .. } if self.state.closed => Err(Refusal::Ended),
            Input::Close { reason } => {
                self.push(SessionEvent::SessionClosed { reason });
                self.cancel_all_schedules("the session closed");
                Ok(self.finish())
            }
            _ => Err(Refusal::Ended),
        }
    }
}

//! A child session started by an `agent` call, journaled once.

use crate::decide::{Planner, Refusal};
use crate::events::SessionEvent;
use crate::schedule_tool::Builtin;
use stead_model::CallId;

impl Planner<'_> {
    /// `child_session_started` for a running `agent` call, once.
    pub(crate) fn child_started(&mut self, call_id: CallId, child: String) -> Result<(), Refusal> {
        let tool = self.started_call(&call_id)?;
        let is_agent = matches!(
            self.agent.tool(&self.state, &tool).and_then(|r| r.builtin),
            Some(Builtin::Agent { .. })
        );
        if !is_agent || self.state.children.contains_key(&call_id) {
            return Err(Refusal::Stale);
        }
        self.push(SessionEvent::ChildSessionStarted {
            call_id,
            child_session_id: child,
        });
        Ok(())
    }
}

//! A child session started by an `agent` call, journaled once.

use async_trait::async_trait;
use serde_json::{json, Value};
use stead_persistence::{Error, NewEvent, NewSession, ParentLink, SessionStore};
use uuid::Uuid;
use crate::agent_schedules::{derived_id, wake_now};
use crate::decide::{Planner, Refusal};
use crate::events::{ParentRef, SessionEvent, TurnEnd};
use crate::schedule_tool::Builtin;
use crate::state::{CallStatus, SessionState};
use crate::tools::{Tool, ToolContext, ToolError, ToolInfo};
use crate::agent_tool::*;

impl Planner<'_> {
    /// `child_session_started` for a running `agent` call, once.
    pub(crate) fn child_started(&mut self, call_id: String, child: String) -> Result<(), Refusal> {
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

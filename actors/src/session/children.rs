//! The live actor's side of sub-agents (`crate::agent_tool`): starting a call's child session,
//! telling the parent through the due index when a child's turn ends, and reading a child's
//! journal for the call's result when that wakes the parent.

use ractor::ActorRef;
use serde_json::Value;
use uuid::Uuid;

use super::{Live, SessionMsg};
use crate::agent_schedules::wake_now;
use crate::agent_tool::{
    child_outcome, child_task, start_child, CHILD_KEY_PREFIX, PARENT_CANCEL_KEY,
};
use crate::decide::Input;
use crate::events::SessionEvent;

impl Live {
    /// Starts (or finds) the child session of the `agent` call `call_id`, then reports it to
    /// the actor as `ChildStarted` (or the call's failure).
    pub(super) fn start_child(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        call_id: String,
        agent: String,
        arguments: Value,
    ) {
        let store = self.deps.store.clone();
        let parent = self.deps.session_id;
        let principal = self.state.principal().to_string();
        let link = crate::events::ParentRef {
            session_id: parent.to_string(),
            call_id: call_id.clone(),
            depth: self.state.depth() + 1,
            // A child of a top-level session is a delegation of its own; deeper children
            // count against their ancestors'.
            delegation: self.state.delegation(&parent.to_string()),
        };
        let due_changed = self.deps.due_changed.clone();
        let me = myself.clone();
        let metadata = serde_json::Value::Object(self.metadata.clone());
        tokio::spawn(async move {
            let task = child_task(&arguments);
            let started = start_child(
                store.as_ref(),
                parent,
                link,
                &principal,
                &agent,
                task,
                metadata,
            )
            .await;
            let input = match started {
                Ok(child) => {
                    due_changed.notify_one();
                    Input::ChildStarted {
                        call_id,
                        child_session_id: child.to_string(),
                    }
                }
                Err(error) => Input::ToolFailed {
                    call_id,
                    error: format!("the child session could not be started: {error}"),
                },
            };
            let _ = me.cast(SessionMsg::Input(input, None));
        });
    }

    /// The call `call_id` was cancelled (its turn was, or the session closed): its child's turn
    /// is cancelled too, through a due-index row of the child that the scheduler delivers on
    /// whichever node holds it (and the child's own children follow the same way).
    pub(super) fn cancel_child(&self, call_id: &str) {
        let Some(child) = self
            .state
            .children
            .get(call_id)
            .and_then(|c| c.parse::<Uuid>().ok())
        else {
            return;
        };
        let store = self.deps.store.clone();
        let due_changed = self.deps.due_changed.clone();
        let agent = self.deps.agent.name.clone();
        let parent = self.deps.session_id;
        tokio::spawn(async move {
            let definition = serde_json::json!({"kind": "parent_cancelled", "parent": parent});
            let row = wake_now(child, PARENT_CANCEL_KEY.into(), &agent, definition);
            match store.put_schedules(&[row]).await {
                Ok(()) => due_changed.notify_one(),
                Err(error) => {
                    tracing::warn!(session = %parent, %child, %error, "the child's cancel could not be recorded")
                }
            }
        });
    }

    /// A child tells its parent's actor, when that is live on this node, what it just did: a
    /// `tool_progress` of the parent's call (not journaled; a parent on another node learns
    /// the child's status from its row, docs/sessions.md).
    pub(super) fn report_to_parent(&self, line: &Option<String>) {
        let Some(parent) = &self.state.parent else {
            return;
        };
        let Ok(parent_id) = parent.session_id.parse::<Uuid>() else {
            return;
        };
        let Some(actor) = self
            .deps
            .peers
            .upgrade()
            .and_then(|peers| peers.live_actor(parent_id))
        else {
            return;
        };
        let progress = crate::tools::ToolProgress {
            child_session_id: Some(self.deps.session_id.to_string()),
            child_status: Some(self.state.status().as_str().to_string()),
            text: line.clone(),
            ..Default::default()
        };
        let _ = actor.cast(SessionMsg::Progress {
            call_id: parent.call_id.clone(),
            progress,
        });
    }

    /// What a model call of this session counts against: its delegation's step counter, when
    /// it belongs to one.
    pub(super) fn delegation_steps(&self) -> DelegationSteps {
        let own = self.deps.session_id.to_string();
        DelegationSteps {
            delegation: self.state.delegation(&own).and_then(|id| id.parse().ok()),
            limit: self.deps.agent.rules.delegation.max_steps,
            store: self.deps.store.clone(),
        }
    }

    /// A child session whose turn ended wakes its parent: a due-index row of the parent, due
    /// now (logged on failure: the parent's activation mends it).
    pub(super) async fn notify_parent(&self) {
        let Some(parent) = &self.state.parent else {
            return;
        };
        let Ok(parent_id) = parent.session_id.parse::<Uuid>() else {
            return;
        };
        let row = wake_now(
            parent_id,
            format!("{CHILD_KEY_PREFIX}{}", parent.call_id),
            &self.deps.agent.name,
            serde_json::json!({"kind": "child_finished", "child_session_id": self.deps.session_id}),
        );
        match self.deps.store.put_schedules(&[row]).await {
            Ok(()) => self.deps.due_changed.notify_one(),
            Err(error) => {
                tracing::warn!(session = %self.deps.session_id, %error, "the parent could not be told that this child ended")
            }
        }
    }

    /// At activation: a call whose child ended while no wake-up reached this session (a crash
    /// between the child's append and its row) gets its wake-up now.
    pub(super) async fn mend_children(&self) {
        let waiting: Vec<String> = self
            .state
            .children
            .keys()
            .filter(|call| crate::agent_tool::waits_for_child(&self.state, call))
            .cloned()
            .collect();
        for call_id in waiting {
            if self.child_result(&call_id).await.is_none() {
                continue;
            }
            let row = wake_now(
                self.deps.session_id,
                format!("{CHILD_KEY_PREFIX}{call_id}"),
                &self.deps.agent.name,
                serde_json::json!({ "kind": "child_finished" }),
            );
            if self.deps.store.put_schedules(&[row]).await.is_ok() {
                self.deps.due_changed.notify_one();
            }
        }
    }

    /// The result (or error) of the call `call_id` from its child's journal; `None` when the
    /// call does not wait for a child or the child's turn still runs.
    pub(super) async fn child_result(&self, call_id: &str) -> Option<Input> {
        if !crate::agent_tool::waits_for_child(&self.state, call_id) {
            return None;
        }
        let child: Uuid = self.state.children.get(call_id)?.parse().ok()?;
        // A child that is not in this database (purged, or the parent was imported without
        // it) will never answer: the call fails instead of waiting for good.
        if let Err(stead_persistence::Error::SessionNotFound(_)) =
            self.deps.store.get_session(child).await
        {
            return Some(Input::ToolFailed {
                call_id: call_id.to_string(),
                error: format!("the child session {child} does not exist (purged, or not imported with its parent)"),
            });
        }
        let mut events = Vec::new();
        let mut after = 0;
        loop {
            let page = match self.deps.store.read(child, after, 1000).await {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(session = %self.deps.session_id, %child, %error, "the child's journal could not be read");
                    return None;
                }
            };
            let Some(last) = page.last() else { break };
            after = last.seq;
            events.extend(
                page.iter()
                    .filter_map(|e| SessionEvent::from_parts(&e.kind, &e.payload)),
            );
        }
        Some(match child_outcome(child, &events)? {
            Ok(result) => Input::ToolFinished {
                call_id: call_id.to_string(),
                result,
            },
            Err(error) => Input::ToolFailed {
                call_id: call_id.to_string(),
                error,
            },
        })
    }
}

/// A model call's charge against its delegation's steps (`sessions.max_delegation_steps`).
pub(super) struct DelegationSteps {
    delegation: Option<Uuid>,
    limit: u32,
    store: std::sync::Arc<dyn stead_persistence::JournalStore>,
}

impl DelegationSteps {
    /// Counts the call; the error that fails it when the delegation has made its limit of
    /// model calls. A database that cannot count lets the call go ahead (logged): the limit is
    /// a bound on runaway delegation, and the journal's own writes report the database.
    pub(super) async fn charge(&self) -> Option<String> {
        let delegation = self.delegation?;
        match self.store.charge_delegation_step(delegation).await {
            Ok(steps) if steps > i64::from(self.limit) => Some(format!(
                "this delegation (session {delegation} and its sub-agents) has made {} model \
                 calls, the most sessions.max_delegation_steps allows",
                self.limit
            )),
            Ok(_) => None,
            Err(error) => {
                tracing::warn!(%delegation, %error, "the delegation's step could not be counted");
                None
            }
        }
    }
}

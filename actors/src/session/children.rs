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
use stead_model::CallId;

impl Live {
    /// Starts (or finds) the child session of the `agent` call `call_id`, then reports it to
    /// the actor as `ChildStarted` (or the call's failure).
    pub(super) fn start_child(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        call_id: CallId,
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
            message: self.state.root_message(&parent.to_string()),
        };
        let max_sessions = self.deps.agent.rules.delegation.max_sessions;
        let due_changed = self.deps.due_changed.clone();
        let me = myself.clone();
        let metadata = serde_json::Value::Object(self.metadata.clone());
        tokio::spawn(async move {
            // Every child counts against its top-level message's sessions (a child re-started
            // after a crash counts again: the limit errs on the side of stopping).
            let charged = match link
                .message
                .as_ref()
                .and_then(|m| Some((m.session_id.parse::<Uuid>().ok()?, m.turn_seq)))
            {
                Some((row, turn_seq)) => {
                    charge_message(store.as_ref(), row, turn_seq, true, max_sessions).await
                }
                None => None,
            };
            if let Some(error) = charged {
                let _ = me.cast(SessionMsg::Input(
                    Input::ToolFailed { call_id, error },
                    None,
                ));
                return;
            }
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
        let counter = self
            .state
            .parent
            .as_ref()
            .and_then(|parent| match &parent.message {
                Some(message) => Some((message.session_id.parse().ok()?, message.turn_seq)),
                None => Some((self.state.delegation(&own)?.parse().ok()?, 0)),
            });
        DelegationSteps {
            counter,
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
        let waiting: Vec<CallId> = self
            .state
            .children
            .keys()
            .filter(|call| crate::agent_tool::waits_for_child(&self.state, call))
            .cloned()
            .collect();
        for call_id in waiting {
            self.mend_child(&call_id).await;
        }
    }

    /// A wake-up for the call `call_id` when its child has ended: at activation, and when the
    /// call's `child_session_started` is journaled — a child re-started by a recovery may have
    /// answered before the crash, and its wake-up, delivered before the call named the child,
    /// was refused as stale and deleted (a parent then waited for good: the delegation crash
    /// test found it). Only ever writes the row: deleting one here could drop the wake-up of
    /// a child that ends meanwhile.
    pub(super) async fn mend_child(&self, call_id: &CallId) {
        if self.child_result(call_id).await.is_none() {
            return;
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
                call_id: CallId::new(call_id.to_string()),
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
                call_id: CallId::new(call_id.to_string()),
                result,
            },
            Err(failure) => Input::ToolFailed {
                call_id: CallId::new(call_id.to_string()),
                error: failure.to_string(),
            },
        })
    }
}

/// A model call's charge against its top-level message's sub-agent budget
/// (`sessions.max_delegation_steps`).
pub(super) struct DelegationSteps {
    /// The counting row and turn seq: the top-level session's with its message's turn, or —
    /// for a child from a journal older than per-message budgets — its delegation's row.
    counter: Option<(Uuid, i64)>,
    limit: u32,
    store: std::sync::Arc<dyn stead_persistence::SessionStore>,
}

impl DelegationSteps {
    /// Counts the call; the error that fails it when the message's sub-agents have made
    /// their limit of model calls, or when the count cannot be made (fails closed: a database
    /// that cannot count must not let a runaway tree go on).
    pub(super) async fn charge(&self) -> Option<String> {
        let (row, turn_seq) = self.counter?;
        charge_message(&*self.store, row, turn_seq, false, self.limit).await
    }
}

/// Charges one model call (or, with `session`, one child session) to the top-level message
/// `turn_seq` of session `row`; the error when it is over `limit` or cannot be counted.
pub(super) async fn charge_message(
    store: &dyn stead_persistence::SessionStore,
    row: Uuid,
    turn_seq: i64,
    session: bool,
    limit: u32,
) -> Option<String> {
    let (what, setting) = if session {
        (
            "started sub-agent sessions",
            "sessions.max_delegation_sessions",
        )
    } else {
        (
            "made sub-agent model calls",
            "sessions.max_delegation_steps",
        )
    };
    match store.charge_delegation(row, turn_seq, session).await {
        Ok(counts) => {
            let count = if session {
                counts.sessions
            } else {
                counts.model_calls
            };
            (count > i64::from(limit)).then(|| {
                format!(
                    "this message of session {row} has {what} {limit} times, the most \
                     {setting} allows"
                )
            })
        }
        Err(error) => {
            tracing::warn!(session = %row, %error, "a sub-agent charge could not be counted");
            Some(format!(
                "the sub-agents' budget ({setting}) could not be counted; nothing was started"
            ))
        }
    }
}

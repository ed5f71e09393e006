//! The live actor's side of the due index (docs/schedules.md): the rows that wake a session
//! when one of its schedules, or an approval's expiry, is due. The journal is the truth; a row
//! is a hint. Rows that announce something new are written before its events are appended (a
//! crash in between leaves a row that wakes the session for nothing, which it then deletes);
//! rows that follow a firing, cancel or decision are written after (a crash in between leaves a
//! row that wakes the session early: the fold refuses a second firing, and the row is mended).

use std::collections::BTreeSet;

use serde_json::json;
use stead_persistence::{ScheduleOwner, ScheduleQuery, ScheduleRow};

use super::Live;
use crate::events::SessionEvent;

/// The due-index key of a call's approval expiry (schedule keys cannot hold `:`).
pub const APPROVAL_KEY_PREFIX: &str = "approval:";

/// The call whose approval expiry a due-index key is, if it is one.
pub fn approval_call(key: &str) -> Option<&str> {
    key.strip_prefix(APPROVAL_KEY_PREFIX)
}

/// What a decision's events change in the due index.
#[derive(Default)]
pub(super) struct Touched {
    /// Rows to write before the append.
    pub(super) before: Vec<ScheduleRow>,
    /// Keys to bring in line with the fold after the append (or after a failed append).
    pub(super) keys: BTreeSet<String>,
}

impl Live {
    fn owner(&self) -> ScheduleOwner {
        ScheduleOwner::Session(self.deps.session_id)
    }

    fn row(
        &self,
        key: &str,
        definition: serde_json::Value,
        due: chrono::DateTime<chrono::Utc>,
    ) -> ScheduleRow {
        ScheduleRow {
            owner: self.owner(),
            key: key.to_string(),
            agent: self.deps.agent.name.clone(),
            definition,
            next_due_at: due,
            updated_at: due,
        }
    }

    /// The rows the events of a decision announce, and the keys they touch.
    pub(super) fn touched(&self, events: &[SessionEvent]) -> Touched {
        let mut touched = Touched::default();
        for event in events {
            match event {
                SessionEvent::ScheduleCreated {
                    key,
                    schedule,
                    next_due_at,
                    ..
                } => {
                    if let Some(due) = next_due_at {
                        let definition = serde_json::to_value(schedule).unwrap_or_default();
                        touched.before.push(self.row(key, definition, *due));
                    }
                    touched.keys.insert(key.clone());
                }
                SessionEvent::ScheduleFired { key, .. }
                | SessionEvent::ScheduleSkipped { key, .. }
                | SessionEvent::ScheduleCancelled { key, .. } => {
                    touched.keys.insert(key.clone());
                }
                SessionEvent::ApprovalRequested { call_id, .. }
                | SessionEvent::GuardrailChecked {
                    call_id,
                    held: Some(_),
                    ..
                } => {
                    if let Some(timeout) = self.deps.agent.rules.approval_timeout {
                        let due = chrono::Utc::now()
                            + chrono::Duration::from_std(timeout).unwrap_or(chrono::Duration::MAX);
                        let key = format!("{APPROVAL_KEY_PREFIX}{call_id}");
                        let definition = json!({"kind": "approval_expiry", "call_id": call_id});
                        touched.before.push(self.row(&key, definition, due));
                    }
                }
                SessionEvent::ToolCallFinished { call_id, .. }
                | SessionEvent::ToolCallFailed { call_id, .. }
                | SessionEvent::ToolCallCancelled { call_id, .. }
                    if self.state.children.contains_key(call_id) =>
                {
                    touched
                        .keys
                        .insert(format!("{}{call_id}", crate::agent_tool::CHILD_KEY_PREFIX));
                }
                SessionEvent::ApprovalDecided { call_id, .. } => {
                    touched
                        .keys
                        .insert(format!("{APPROVAL_KEY_PREFIX}{call_id}"));
                }
                SessionEvent::SessionClosed { .. } | SessionEvent::SessionFailed { .. } => {
                    // Their approvals will never be decided.
                    for call in self.state.pending_approvals() {
                        touched
                            .keys
                            .insert(format!("{APPROVAL_KEY_PREFIX}{}", call.call_id));
                    }
                }
                _ => {}
            }
        }
        touched
    }

    /// Whether the fold wants a row for `key`, and when it is due: a pending schedule, or a
    /// pending approval whose row exists (its deadline is the row's, never moved).
    fn wanted(&self, key: &str) -> Option<Option<ScheduleRow>> {
        if crate::agent_tool::child_call(key).is_some()
            || key == crate::agent_tool::PARENT_CANCEL_KEY
        {
            // A one-shot wake-up: gone once it was looked at (the child writes another when
            // its next turn ends).
            return Some(None);
        }
        if let Some(call_id) = approval_call(key) {
            let pending = self
                .state
                .pending_approvals()
                .iter()
                .any(|c| c.call_id == call_id);
            return if pending { None } else { Some(None) };
        }
        let row = self.state.schedules.get(key).and_then(|s| {
            let due = s.next_due_at?;
            let definition = serde_json::to_value(&s.def).unwrap_or_default();
            Some(self.row(key, definition, due))
        });
        Some(row)
    }

    /// Brings the rows of `keys` in line with the fold (logged on failure: a hint that is off
    /// wakes the session early or late, and activation mends it).
    pub(super) async fn sync_keys(&self, keys: &BTreeSet<String>) {
        let mut put = Vec::new();
        for key in keys {
            match self.wanted(key) {
                None => {} // keep as is
                Some(Some(row)) => put.push(row),
                Some(None) => {
                    if let Err(error) = self.deps.store.delete_schedule(&self.owner(), key).await {
                        tracing::warn!(session = %self.deps.session_id, %error, key, "due index: delete failed");
                    }
                }
            }
        }
        if let Err(error) = self.deps.store.put_schedules(&put).await {
            tracing::warn!(session = %self.deps.session_id, %error, "due index: write failed");
        }
        if !put.is_empty() {
            self.deps.due_changed.notify_one();
        }
    }

    /// At activation: every row of the session in line with the fold (what a crash between a
    /// journal write and its row left is mended here), and an expiry row for each pending
    /// approval that has none (journals from before expiries were rows: the full timeout from
    /// now — late, never early).
    pub(super) async fn sync_due_index(&self) {
        let rows = match self
            .deps
            .store
            .list_schedules(&ScheduleQuery {
                scope: stead_persistence::Scope::Installation,
                session_id: Some(self.deps.session_id),
                limit: stead_persistence::MAX_PAGE,
                ..Default::default()
            })
            .await
        {
            Ok(rows) => rows,
            Err(error) => {
                tracing::warn!(session = %self.deps.session_id, %error, "due index: read failed");
                return;
            }
        };
        // A child's wake-up is left for the scheduler to deliver (activation checks the
        // children itself, below).
        let mut keys: BTreeSet<String> = rows
            .iter()
            .filter(|r| {
                crate::agent_tool::child_call(&r.key).is_none()
                    && r.key != crate::agent_tool::PARENT_CANCEL_KEY
            })
            .map(|r| r.key.clone())
            .collect();
        keys.extend(
            self.state
                .pending_schedules()
                .into_iter()
                .map(|(k, _)| k.clone()),
        );
        let in_index: BTreeSet<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        let missing: Vec<SessionEvent> = self
            .state
            .pending_approvals()
            .into_iter()
            .filter(|c| !in_index.contains(format!("{APPROVAL_KEY_PREFIX}{}", c.call_id).as_str()))
            .map(|c| SessionEvent::ApprovalRequested {
                call_id: c.call_id.clone(),
                tool: c.tool.clone(),
                arguments: c.arguments.clone(),
                args_hash: String::new(),
                reason: String::new(),
            })
            .collect();
        let expiries = self.touched(&missing).before;
        if let Err(error) = self.deps.store.put_schedules(&expiries).await {
            tracing::warn!(session = %self.deps.session_id, %error, "due index: write failed");
        }
        self.sync_keys(&keys).await;
        if !expiries.is_empty() {
            self.deps.due_changed.notify_one();
        }
        self.mend_children().await;
    }
}

//! The live actor's work on an input: decide, journal (fenced), fold and broadcast, keep the
//! row's status and the snapshot up to date, then start the decided actions as model and tool
//! tasks that report back to the actor (`model_call.rs`, `tool_call.rs`, `children.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ractor::ActorRef;
use stead_persistence::{NewEvent, SessionStatus};

use super::{Frame, Live, SessionError, SessionMsg};
use crate::decide::{decide, Action, Input, ModelOutput};
use crate::events::SessionEvent;

impl Live {
    pub(super) fn broadcast(&mut self, frame: Frame) {
        if self.subscribers.is_empty() {
            return;
        }
        let frame = Arc::new(frame);
        self.subscribers
            .retain(|s| match s.sender.try_send(frame.clone()) {
                Ok(()) => true,
                Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                    s.lagged.store(true, Ordering::Relaxed);
                    false
                }
                Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => false,
            });
    }

    pub(super) async fn process(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        input: Input,
    ) -> Result<(i64, Vec<Action>), SessionError> {
        self.refuse_past_full_queue(&input)?;
        let woken = matches!(
            input,
            Input::SchedulesDue { .. }
                | Input::ApprovalExpired { .. }
                | Input::ChildFinished { .. }
        );
        // A child started by this call may have ended already (a recovery re-started a child
        // that answered before the crash, and its wake-up came before this input): looked at
        // once the call names it, below.
        let started_child = match &input {
            Input::ChildStarted { call_id, .. } => Some(call_id.clone()),
            _ => None,
        };
        // A child ended: its journal says what the call's result is.
        let input = match input {
            Input::ChildFinished { call_id } => match self.child_result(&call_id).await {
                Some(input) => input,
                None => {
                    let key = format!("{}{call_id}", crate::agent_tool::CHILD_KEY_PREFIX);
                    self.sync_keys(&std::iter::once(key).collect()).await;
                    return Err(SessionError::Refused(crate::Refusal::Stale));
                }
            },
            other => other,
        };
        let session_id = self.deps.session_id.to_string();
        let decision = match decide(&self.state, &session_id, input, &self.deps.agent.rules) {
            Ok(decision) => decision,
            Err(refusal) => {
                // Woken by a row the journal does not back (fired, cancelled or decided
                // already): the session's rows are mended, so it is not woken again for it.
                if woken {
                    self.sync_due_index().await;
                }
                return Err(SessionError::Refused(refusal));
            }
        };
        if !decision.events.is_empty() {
            self.commit(myself, decision.events, decision.status)
                .await?;
            if let Some(call_id) = started_child {
                self.mend_child(&call_id).await;
            }
        }
        Ok((self.state.last_seq, decision.actions))
    }

    /// A message that would queue (or a firing, which queues its message) while the queue is
    /// full is refused; the scheduler tries a firing again.
    fn refuse_past_full_queue(&self, input: &Input) -> Result<(), SessionError> {
        let queues = match input {
            Input::UserMessage { mode, .. } => matches!(
                mode.unwrap_or(self.deps.agent.rules.message_mode),
                crate::MessageMode::Queue | crate::MessageMode::Steer
            ),
            Input::SchedulesDue { .. } => true,
            _ => false,
        };
        if queues
            && self.state.turn.is_some()
            && self.state.queued.len() >= self.deps.lifecycle.max_queued_messages
        {
            return Err(SessionError::Refused(crate::Refusal::QueueFull));
        }
        Ok(())
    }

    /// Journals a decision's events (fenced, with the row's status in the same transaction),
    /// then folds and broadcasts them and keeps the session's rows and parent up to date.
    async fn commit(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        events: Vec<SessionEvent>,
        status: Option<SessionStatus>,
    ) -> Result<(), SessionError> {
        let ends_turn = events.iter().any(|e| {
            matches!(
                e,
                SessionEvent::TurnFinished { .. }
                    | SessionEvent::TurnCancelled { .. }
                    | SessionEvent::SessionFailed { .. }
                    | SessionEvent::SessionClosed { .. }
            )
        });
        let rows: Vec<NewEvent> = events
            .iter()
            .map(|e| {
                let (kind, payload) = e.to_parts();
                NewEvent::new(kind, payload)
            })
            .collect();
        let times: Vec<_> = rows.iter().map(|r| r.created_at).collect();
        // Rows that announce something new go in first (docs/schedules.md).
        let mut touched = self.touched(&events);
        if let Err(error) = self.deps.store.put_schedules(&touched.before).await {
            return Err(SessionError::Storage(error.to_string()));
        }
        touched
            .keys
            .extend(touched.before.iter().map(|r| r.key.clone()));
        let appended = self
            .deps
            .store
            .append_fenced(
                self.deps.session_id,
                self.state.last_seq,
                self.deps.lease.epoch,
                status.filter(|s| *s != self.synced_status),
                rows,
            )
            .await;
        if appended.is_err() && !touched.before.is_empty() {
            self.sync_keys(&touched.keys).await;
        }
        let seqs = self.appended(myself, appended)?;
        if let Some(status) = status {
            self.track_status(status);
        }
        let reported = crate::agent_tool::progress_line(&events);
        for ((seq, event), at) in seqs.into_iter().zip(events).zip(times) {
            self.fold_committed(seq, event, at);
        }
        self.sync_keys(&touched.keys).await;
        if ends_turn {
            self.notify_parent().await;
        }
        self.report_to_parent(&reported);
        Ok(())
    }

    /// The seqs of an append, or why it wrote nothing.
    fn appended(
        &self,
        myself: &ActorRef<SessionMsg>,
        appended: stead_persistence::Result<Vec<i64>>,
    ) -> Result<Vec<i64>, SessionError> {
        match appended {
            Ok(seqs) => Ok(seqs),
            Err(
                error @ (stead_persistence::Error::Conflict { .. }
                | stead_persistence::Error::Fenced { .. }),
            ) => {
                // Another writer appended to this session: this actor's state is stale and
                // it must not act on it. It stops; the next access re-activates from the
                // journal (docs/architecture.md, invariant 1).
                tracing::warn!(session = %self.deps.session_id, %error, "fenced out; stopping");
                myself.stop(Some("fenced by another writer".into()));
                Err(SessionError::Journal(error.to_string()))
            }
            Err(error @ stead_persistence::Error::EventTooLarge { .. }) => {
                Err(SessionError::TooLarge(error.to_string()))
            }
            // Nothing was written (a failed commit, an unreachable database): the state is
            // unchanged and the input may be tried again.
            Err(error) if !error.is_permanent() => Err(SessionError::Storage(error.to_string())),
            Err(error) => Err(SessionError::Journal(error.to_string())),
        }
    }

    /// The status the row holds now; a running session's turn has a trace span.
    fn track_status(&mut self, status: SessionStatus) {
        self.synced_status = status;
        if status != SessionStatus::Running {
            self.turn_span = None;
        } else if self.turn_span.is_none() {
            let agent = &self.deps.agent.name;
            self.turn_span = Some(tracing::info_span!(
                parent: None,
                "invoke_agent",
                "otel.name" = format!("invoke_agent {agent}"),
                "otel.kind" = "internal",
                "gen_ai.operation.name" = "invoke_agent",
                "gen_ai.agent.name" = %agent,
                "gen_ai.conversation.id" = %self.deps.session_id,
            ));
        }
    }

    /// One committed event: folded into the state, and sent to every subscriber.
    fn fold_committed(&mut self, seq: i64, event: SessionEvent, at: chrono::DateTime<chrono::Utc>) {
        self.state.apply(seq, &event);
        self.forget_ended_tools(&event);
        // A finished call's text is in its event now: a client that attaches later must not
        // be sent it again as a stream.
        if let SessionEvent::ModelCallFinished { call_id, .. }
        | SessionEvent::ModelCallFailed { call_id, .. }
        | SessionEvent::BudgetApprovalRequested { call_id, .. } = &event
        {
            if self
                .streaming
                .as_ref()
                .is_some_and(|s| &s.call_id == call_id)
            {
                self.streaming = None;
            }
        }
        self.broadcast(Frame::Event {
            seq,
            event: Arc::new(event),
            at,
            wire: Default::default(),
        });
    }

    /// Drops the progress of tool calls that `event` ends, and cancels them (which tells a
    /// tool that still runs — a cancelled one — to stop; the others are done already).
    fn forget_ended_tools(&mut self, event: &SessionEvent) {
        match event {
            SessionEvent::ToolCallFinished { call_id, .. }
            | SessionEvent::ToolCallFailed { call_id, .. }
            | SessionEvent::ToolCallCancelled { call_id, .. } => {
                if let Some(cancel) = self.running_tools.remove(call_id) {
                    cancel.cancel();
                }
                self.progress.remove(call_id);
            }
            _ => {}
        }
    }

    /// Before a model call: journals the agent's dynamic (MCP) tools when they are not the list
    /// the session last journaled, so the call sees the list its journal holds. A failure to
    /// journal leaves the old list in force (logged); the call goes ahead.
    pub(super) async fn journal_tool_list(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(dynamic) = self.deps.agent.dynamic.clone() else {
            return;
        };
        let (digest, tools) = dynamic.seen();
        if self.state.seen_tools_digest.as_deref() == Some(digest.as_str()) {
            return;
        }
        if let Err(error) = self
            .process(myself, Input::ToolsChanged { digest, tools })
            .await
        {
            tracing::warn!(session = %self.deps.session_id, %error, "the tool list could not be journaled");
        }
    }

    /// Mends the row's status at activation (appends carry it from then on). The journal is
    /// the truth; the row is an index over it.
    pub(super) async fn sync_status(&mut self) {
        let status = self.state.status();
        if status == self.synced_status {
            return;
        }
        let id = self.deps.session_id;
        let result = match status {
            SessionStatus::Closed => self.deps.store.close_session(id).await,
            other => self.deps.store.update_status(id, other).await,
        };
        match result {
            Ok(_) => self.synced_status = status,
            Err(error) => tracing::warn!(session = %id, %error, "status update failed"),
        }
    }

    /// Writes the folded state off the actor's task: serializing a long session's state (its
    /// client ids, a transcript never compacted) takes milliseconds, which the next input must
    /// not wait for (`stead bench sessions --step-cost-only`, p99). The copy is cheap (the
    /// state's growing collections are persistent); one write at a time, and a failure only
    /// costs a longer replay next time. The store keeps the highest seq's snapshot, so a late
    /// write never replaces a newer one.
    pub(super) fn snapshot(&mut self) {
        use std::sync::atomic::Ordering;
        if self.snapshot_writing.swap(true, Ordering::AcqRel) {
            return; // the next input tries again
        }
        let state = self.state.clone();
        let (store, id, seq) = (
            self.deps.store.clone(),
            self.deps.session_id,
            self.state.last_seq,
        );
        let writing = self.snapshot_writing.clone();
        self.last_snapshot = seq;
        tokio::spawn(async move {
            let document =
                tokio::task::spawn_blocking(move || crate::replay::snapshot_document(&state)).await;
            let result = match document {
                Ok(document) => store
                    .put_snapshot(id, seq, document)
                    .await
                    .map_err(|e| e.to_string()),
                Err(join) => Err(join.to_string()),
            };
            if let Err(error) = result {
                tracing::warn!(session = %id, %error, "snapshot failed");
            }
            writing.store(false, Ordering::Release);
        });
    }

    /// Starts an action's work as a task that reports back to the actor.
    pub(super) fn start(&mut self, myself: &ActorRef<SessionMsg>, action: Action) {
        if matches!(action, Action::CallModel { .. } | Action::RunTool { .. }) {
            self.tasks_in_flight += 1;
        }
        match action {
            Action::CallModel { call_id } => self.call_model(myself, call_id),
            Action::RunTool {
                call_id,
                tool,
                arguments,
                idempotency_key,
            } => self.run_tool(myself, call_id, tool, arguments, idempotency_key),
            Action::AbortTool { call_id } => {
                if let Some(cancel) = self.running_tools.remove(&call_id) {
                    cancel.cancel();
                }
                self.cancel_child(&call_id);
                self.progress.remove(&call_id);
            }
            Action::AbortModelCall { call_id } => {
                if let Some(streaming) = &self.streaming {
                    if streaming.call_id == call_id {
                        streaming.cancel.cancel();
                    }
                }
                self.streaming = None;
            }
        }
    }
}

pub(super) fn panic_message(join: tokio::task::JoinError) -> String {
    match join.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into()),
        Err(join) => join.to_string(),
    }
}

/// Whether a model's answer holds a NUL character, which the journal cannot store: such an
/// answer fails its call clearly instead of leaving it in flight for good.
pub(super) fn output_holds_nul(output: &ModelOutput) -> bool {
    [&output.text, &output.provider, &output.model]
        .iter()
        .any(|s| s.contains('\0'))
        || output.tool_calls.iter().any(|(name, arguments)| {
            name.contains('\0') || stead_persistence::contains_nul(arguments)
        })
}

/// An error text the journal can store (NUL characters replaced).
pub(super) fn without_nul(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{fffd}")
    } else {
        text
    }
}

//! The live actor's work on an input: decide, journal (fenced), fold and broadcast, keep the
//! row's status and the snapshot up to date, then start the decided actions as model and tool
//! tasks that report back to the actor.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ractor::ActorRef;
use stead_persistence::{NewEvent, SessionStatus};
use tracing::Instrument;

use super::{Frame, Live, ModelError, ModelRequest, SessionError, SessionMsg, ToolSpec};
use crate::decide::{decide, Action, Input, ModelOutput};
use crate::events::SessionEvent;
use crate::tools::{ProgressSink, ToolContext};

/// How long a cancelled tool gets to stop by itself before its task is aborted.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

impl Live {
    pub(super) fn broadcast(&mut self, frame: Frame) {
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
        let session_id = self.deps.session_id.to_string();
        let queues = match &input {
            Input::UserMessage { mode, .. } => matches!(
                mode.unwrap_or(self.deps.agent.rules.message_mode),
                crate::MessageMode::Queue | crate::MessageMode::Steer
            ),
            _ => false,
        };
        // A firing queues its message too: while the queue is full it waits (the scheduler
        // tries again).
        let queues = queues || matches!(input, Input::SchedulesDue { .. });
        if queues
            && self.state.turn.is_some()
            && self.state.queued.len() >= self.deps.lifecycle.max_queued_messages
        {
            return Err(SessionError::Refused(crate::Refusal::QueueFull));
        }
        let woken = matches!(
            input,
            Input::SchedulesDue { .. }
                | Input::ApprovalExpired { .. }
                | Input::ChildFinished { .. }
        );
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
            let ends_turn = decision.events.iter().any(|e| {
                matches!(
                    e,
                    SessionEvent::TurnFinished { .. }
                        | SessionEvent::TurnCancelled { .. }
                        | SessionEvent::SessionFailed { .. }
                        | SessionEvent::SessionClosed { .. }
                )
            });
            let rows: Vec<NewEvent> = decision
                .events
                .iter()
                .map(|e| {
                    let (kind, payload) = e.to_parts();
                    NewEvent::new(kind, payload)
                })
                .collect();
            let times: Vec<_> = rows.iter().map(|r| r.created_at).collect();
            // The row's status changes in the same transaction as the journal.
            let status = decision.status.filter(|s| *s != self.synced_status);
            // Rows that announce something new go in first (docs/schedules.md).
            let mut touched = self.touched(&decision.events);
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
                    status,
                    rows,
                )
                .await;
            if appended.is_err() && !touched.before.is_empty() {
                self.sync_keys(&touched.keys).await;
            }
            let seqs = match appended {
                Ok(seqs) => seqs,
                Err(
                    error @ (stead_persistence::Error::Conflict { .. }
                    | stead_persistence::Error::Fenced { .. }),
                ) => {
                    // Another writer appended to this session: this actor's state is stale and
                    // it must not act on it. It stops; the next access re-activates from the
                    // journal (docs/architecture.md, invariant 1).
                    tracing::warn!(session = %self.deps.session_id, %error, "fenced out; stopping");
                    myself.stop(Some("fenced by another writer".into()));
                    return Err(SessionError::Journal(error.to_string()));
                }
                Err(error @ stead_persistence::Error::EventTooLarge { .. }) => {
                    return Err(SessionError::TooLarge(error.to_string()))
                }
                // Nothing was written (a failed commit, an unreachable database): the state is
                // unchanged and the input may be tried again.
                Err(error) if !error.is_permanent() => {
                    return Err(SessionError::Storage(error.to_string()))
                }
                Err(error) => return Err(SessionError::Journal(error.to_string())),
            };
            if let Some(status) = decision.status {
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
            let reported = crate::agent_tool::progress_line(&decision.events);
            for ((seq, event), at) in seqs.into_iter().zip(decision.events).zip(times) {
                self.state.apply(seq, &event);
                self.forget_ended_tools(&event);
                // A finished call's text is in its event now: a client that attaches later must
                // not be sent it again as a stream.
                if let SessionEvent::ModelCallFinished { call_id, .. }
                | SessionEvent::ModelCallFailed { call_id, .. } = &event
                {
                    if self
                        .streaming
                        .as_ref()
                        .is_some_and(|(c, _, _)| c == call_id)
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
            self.sync_keys(&touched.keys).await;
            if ends_turn {
                self.notify_parent().await;
            }
            self.report_to_parent(&reported);
        }
        Ok((self.state.last_seq, decision.actions))
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

    /// Writes the folded state; a failure only costs a longer replay next time.
    pub(super) async fn snapshot(&mut self) {
        let state = crate::replay::snapshot_document(&self.state);
        match self
            .deps
            .store
            .put_snapshot(self.deps.session_id, self.state.last_seq, state)
            .await
        {
            Ok(()) => self.last_snapshot = self.state.last_seq,
            Err(error) => {
                tracing::warn!(session = %self.deps.session_id, %error, "snapshot failed")
            }
        }
    }

    /// Starts an action's work as a task that reports back to the actor.
    pub(super) fn start(&mut self, myself: &ActorRef<SessionMsg>, action: Action) {
        if matches!(action, Action::CallModel { .. } | Action::RunTool { .. }) {
            self.tasks_in_flight += 1;
        }
        match action {
            Action::CallModel { call_id } => {
                let cancel = Arc::new(AtomicBool::new(false));
                self.streaming = Some((call_id.clone(), cancel.clone(), String::new()));
                let agent = &self.deps.agent;
                let base_prompt = self
                    .state
                    .overrides
                    .system_prompt
                    .clone()
                    .unwrap_or_else(|| agent.system_prompt.clone());
                let summary = self.state.summary.clone();
                let memory = self.state.memory.clone();
                let context_rules = agent.rules.context.clone();
                let transcript: Vec<_> = self.state.transcript.iter().cloned().collect();
                let request = ModelRequest {
                    session_id: self.deps.session_id,
                    route: self.state.route(&agent.rules.route).to_string(),
                    system_prompt: crate::context::system_prompt_with(
                        &base_prompt,
                        summary.as_deref(),
                        &memory,
                    ),
                    transcript: crate::context::shown(
                        &transcript,
                        context_rules.max_tool_result_tokens,
                    ),
                    principal: self.state.principal().to_string(),
                    metadata: self.metadata.clone(),
                    repair: self
                        .state
                        .turn
                        .as_ref()
                        .is_some_and(|t| t.rejected_replies > 0),
                    tools: agent
                        .tools
                        .values()
                        .map(|t| ToolSpec {
                            name: t.name().to_string(),
                            description: t.description().to_string(),
                            parameters: t.parameters(),
                        })
                        .chain(self.state.seen_tools.iter().map(|t| ToolSpec {
                            name: t.name.clone(),
                            description: t.description.clone(),
                            parameters: t.parameters.clone(),
                        }))
                        .collect(),
                };
                let model = self.deps.model.clone();
                let me = myself.clone();
                let turn = self.turn_span.clone().unwrap_or_else(tracing::Span::none);
                let steps = self.delegation_steps();
                let calibration = self.calibration.clone();
                tokio::spawn(async move {
                    let last = calibration.lock().ok().and_then(|l| l.clone());
                    // The prompt must fit the agent's budget before anything is charged or sent.
                    match super::compaction::fit(
                        model.as_ref(),
                        &request,
                        &context_rules,
                        &super::compaction::PromptParts {
                            base: &base_prompt,
                            summary: summary.as_deref(),
                            memory: &memory,
                        },
                        last.as_ref(),
                        &call_id,
                        cancel.clone(),
                    )
                    .await
                    {
                        super::compaction::Fit::Send => {}
                        super::compaction::Fit::Compact(input) => {
                            let _ = me.cast(SessionMsg::Input(input, None));
                            return;
                        }
                        super::compaction::Fit::Overflow(error) => {
                            let _ = me.cast(SessionMsg::Input(
                                Input::ModelFailed { call_id, error },
                                None,
                            ));
                            return;
                        }
                    }
                    if let Some(error) = steps.charge().await {
                        let _ = me.cast(SessionMsg::Input(
                            Input::ModelFailed { call_id, error },
                            None,
                        ));
                        return;
                    }
                    let (deltas, mut stream) = tokio::sync::mpsc::unbounded_channel();
                    let forward = {
                        let me = me.clone();
                        let call_id = call_id.clone();
                        tokio::spawn(async move {
                            while let Some(text) = stream.recv().await {
                                let _ = me.cast(SessionMsg::Delta {
                                    call_id: call_id.clone(),
                                    text,
                                });
                            }
                        })
                    };
                    let counted = super::Calibration {
                        route: request.route.clone(),
                        reported: 0,
                        chars: super::prompt_chars(&request),
                    };
                    let call = tokio::spawn(
                        async move { model.complete(request, deltas, cancel).await }
                            .instrument(turn),
                    );
                    let result = match call.await {
                        Ok(result) => result,
                        Err(join) => Err(ModelError::Crashed(panic_message(join))),
                    };
                    let _ = forward.await;
                    if let Ok(output) = &result {
                        if let Ok(mut last) = calibration.lock() {
                            *last = Some(super::Calibration {
                                reported: output.usage.prompt_tokens,
                                ..counted
                            });
                        }
                    }
                    let input = match result {
                        Ok(output) if output_holds_nul(&output) => Input::ModelFailed {
                            call_id,
                            error: "the model's answer contains a NUL character (\\u0000), \
                                    which the journal cannot store"
                                .into(),
                        },
                        Ok(output) => Input::ModelFinished { call_id, output },
                        Err(error) => Input::ModelFailed {
                            call_id,
                            error: without_nul(error.to_string()),
                        },
                    };
                    let _ = me.cast(SessionMsg::Input(input, None));
                });
            }
            Action::RunTool {
                call_id,
                tool,
                arguments,
                idempotency_key,
            } => {
                let Some(tool) = self.deps.agent.tool(&tool) else {
                    let input = Input::ToolFailed {
                        call_id,
                        error: format!("unknown tool `{tool}` (its source no longer offers it)"),
                    };
                    let _ = myself.cast(SessionMsg::Input(input, None));
                    return;
                };
                if let Some(crate::schedule_tool::Builtin::Agent { agent }) = tool.builtin() {
                    self.start_child(myself, call_id, agent, arguments);
                    return;
                }
                if tool.builtin().is_some() {
                    // Run inside a decision: its effects and result are journaled together.
                    // Milliseconds, as REST creates schedules: the due index keeps microseconds.
                    let now = chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 3);
                    let _ =
                        myself.cast(SessionMsg::Input(Input::RunBuiltin { call_id, now }, None));
                    return;
                }
                let cancel = tokio_util::sync::CancellationToken::new();
                self.running_tools.insert(call_id.clone(), cancel.clone());
                let progress = {
                    let me = myself.clone();
                    let call_id = call_id.clone();
                    ProgressSink::new(move |progress| {
                        let _ = me.cast(SessionMsg::Progress {
                            call_id: call_id.clone(),
                            progress,
                        });
                    })
                };
                let context = ToolContext {
                    session_id: self.deps.session_id,
                    call_id: call_id.clone(),
                    idempotency_key,
                    cancel: cancel.clone(),
                    progress,
                    principal: self.state.principal().to_string(),
                };
                let me = myself.clone();
                let span = tracing::info_span!(
                    parent: self.turn_span.as_ref().and_then(|s| s.id()),
                    "execute_tool",
                    "otel.name" = format!("execute_tool {}", tool.name()),
                    "otel.kind" = "internal",
                    "gen_ai.operation.name" = "execute_tool",
                    "gen_ai.tool.name" = %tool.name(),
                    "gen_ai.tool.call.id" = %call_id,
                    "gen_ai.conversation.id" = %self.deps.session_id,
                    // Set by tools with a server behind them (MCP).
                    "stead.tool.server" = tracing::field::Empty,
                );
                tokio::spawn(async move {
                    // The tool runs in a task of its own: a panic in it is contained there and
                    // becomes the call's error; the session and its actor carry on.
                    let mut run = tokio::spawn(
                        async move { tool.execute(arguments, &context).await }.instrument(span),
                    );
                    // A cancelled call gets a grace to stop by itself; then its task is aborted.
                    // Either way exactly one outcome goes back (the journal already holds the
                    // cancel, so the actor drops it as stale).
                    let outcome = tokio::select! {
                        outcome = &mut run => outcome,
                        () = async {
                            cancel.cancelled().await;
                            tokio::time::sleep(CANCEL_GRACE).await;
                        } => {
                            run.abort();
                            run.await
                        }
                    };
                    let input = match outcome {
                        Ok(Ok(result)) if stead_persistence::contains_nul(&result) => {
                            Input::ToolFailed {
                                call_id,
                                error: "the tool's result contains a NUL character (\\u0000), \
                                        which the journal cannot store"
                                    .into(),
                            }
                        }
                        Ok(Ok(result)) => Input::ToolFinished { call_id, result },
                        Ok(Err(error)) => Input::ToolFailed {
                            call_id,
                            error: without_nul(error.0),
                        },
                        Err(join) => Input::ToolFailed {
                            call_id,
                            error: format!("the tool crashed: {}", panic_message(join)),
                        },
                    };
                    let _ = me.cast(SessionMsg::Input(input, None));
                });
            }
            Action::AbortTool { call_id } => {
                if let Some(cancel) = self.running_tools.remove(&call_id) {
                    cancel.cancel();
                }
                self.cancel_child(&call_id);
                self.progress.remove(&call_id);
            }
            Action::AbortModelCall { call_id } => {
                if let Some((current, cancel, _)) = &self.streaming {
                    if *current == call_id {
                        cancel.store(true, Ordering::Relaxed);
                    }
                }
                self.streaming = None;
            }
        }
    }
}

fn panic_message(join: tokio::task::JoinError) -> String {
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
fn output_holds_nul(output: &ModelOutput) -> bool {
    [&output.text, &output.provider, &output.model]
        .iter()
        .any(|s| s.contains('\0'))
        || output.tool_calls.iter().any(|(name, arguments)| {
            name.contains('\0') || stead_persistence::contains_nul(arguments)
        })
}

/// An error text the journal can store (NUL characters replaced).
fn without_nul(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{fffd}")
    } else {
        text
    }
}

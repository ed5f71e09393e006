//! A session's state as a pure fold over its journal: `apply(state, event)`. The same fold
//! rebuilds an actor on activation and answers `state?at=N`.

use std::collections::{BTreeSet, VecDeque};
use stead_persistence::SessionStatus;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::{Attachment, Overrides, RequestedCall, SeenTool, Usage};
use stead_model::CallId;

mod apply;

/// The conversation the model sees: a persistent vector, so that the state and each model
/// call's request share it rather than copy it.
pub type Transcript = imbl::Vector<TranscriptEntry>;

/// One entry of the conversation the model sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum TranscriptEntry {
    User {
        text: String,
        /// Files the message carries (by reference).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<Attachment>,
    },
    Assistant {
        text: String,
        tool_calls: Vec<RequestedCall>,
    },
    Tool {
        call_id: CallId,
        tool: String,
        content: Value,
    },
}

/// Where one tool call of the current turn stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallStatus {
    /// Asked for by the model; its policy has not been applied yet.
    Requested,
    AwaitingApproval {
        args_hash: String,
        reason: String,
    },
    /// Cleared to run (by policy or by a decision).
    Approved,
    /// It ran, and an `approve` guardrail holds its result for a person (`guardrail_checked`
    /// with `held`): approved, the model sees `result`; rejected, the call fails.
    Held {
        result: Value,
        checks: Vec<stead_guardrails::results::GuardrailCheck>,
    },
    Started {
        idempotency_key: String,
    },
    Finished,
    Failed {
        in_doubt: bool,
    },
    /// Stopped by a cancel while it ran (`tool_call_cancelled`).
    Cancelled,
}

impl CallStatus {
    /// Waiting for a person: an approval of the call, or of its held result.
    pub fn awaits_person(&self) -> bool {
        matches!(
            self,
            CallStatus::AwaitingApproval { .. } | CallStatus::Held { .. }
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallState {
    pub call_id: CallId,
    pub tool: String,
    pub arguments: Value,
    pub status: CallStatus,
}

/// The turn in progress.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Turn {
    /// Model calls made in this turn (bounded by the agent's `max_steps`).
    pub model_calls: u32,
    /// The model call started and not yet finished, if any.
    pub model_call: Option<CallId>,
    /// Tool calls of the latest model answer, in order.
    pub calls: Vec<CallState>,
    /// Messages that steer this turn: they join the transcript before its next model call
    /// (or, if it ends first, start the next turn).
    #[serde(default)]
    pub steering: Vec<String>,
    /// The attachments of each of `steering`, in the same order (empty in snapshots from
    /// before attachments: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steering_attachments: Vec<Vec<Attachment>>,
    /// Replies of this turn rejected as unusable (`reply_rejected`): while any is, the next
    /// model call is a repair call (no tools, an instruction to answer).
    #[serde(default)]
    pub rejected_replies: u32,
    /// The seq of the event that started this turn (its message): the key of the turn's
    /// sub-agent budget (0 in snapshots from before it).
    #[serde(default)]
    pub started_seq: i64,
    /// The model call in flight waits for a decision on a budget (`budget_approval_requested`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_wait: Option<BudgetWait>,
    /// The overspend a person approved for the model call in flight (USD), until it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_grant: Option<f64>,
}

/// A model call a budget refused, waiting for a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetWait {
    pub call_id: CallId,
    /// The budget's name (``key `ci` ``, ``project `acme` ``).
    pub budget: String,
    /// How far over the budget the call would go (USD).
    pub needed_usd: f64,
    pub reason: String,
}

impl Turn {
    pub fn call(&self, call_id: &str) -> Option<&CallState> {
        self.calls.iter().find(|c| c.call_id == call_id)
    }

    fn call_mut(&mut self, call_id: &str) -> Option<&mut CallState> {
        self.calls.iter_mut().find(|c| c.call_id == call_id)
    }

    /// Whether the turn waits for a person: a tool call's approval, a held result's, or a
    /// budget's.
    pub fn awaiting_approval(&self) -> bool {
        self.budget_wait.is_some() || self.calls.iter().any(|c| c.status.awaits_person())
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionState {
    pub last_seq: i64,
    pub agent: String,
    /// Who the session's model calls are charged to (`session_created`, `session_forked`).
    pub principal: Option<String>,
    /// Persistent collections (`imbl`): `decide` works on a copy of the state, which must cost
    /// the same whatever the session's length (`stead bench sessions`, step cost).
    pub transcript: Transcript,
    pub turn: Option<Turn>,
    /// User messages that arrived during a turn, handled after it, in order.
    pub queued: VecDeque<String>,
    /// The schedule each of `queued` came from (`None`: not a schedule's), in the same order:
    /// a schedule with a firing still queued does not fire again (docs/schedules.md).
    pub queued_from: VecDeque<Option<String>>,
    /// The attachments of each of `queued`, in the same order (kept aligned like
    /// `queued_from`).
    pub queued_attachments: VecDeque<Vec<Attachment>>,
    /// When the session's schedules fired in the hour up to the latest firing (the window of
    /// `schedules.max_firings_per_hour`).
    pub recent_firings: VecDeque<chrono::DateTime<chrono::Utc>>,
    pub client_ids: imbl::OrdSet<String>,
    /// Tools approved for the rest of the session.
    pub approved_tools: BTreeSet<String>,
    /// Calls whose approval was decided (so a late second decision is a conflict, even after
    /// the turn moved on).
    pub decided_approvals: imbl::OrdSet<String>,
    pub usage: Usage,
    /// Counters that make generated ids deterministic under replay.
    pub model_calls_total: u64,
    pub tool_calls_total: u64,
    /// Set by `session_failed`: why the session stopped for good.
    pub failed: Option<String>,
    /// Set by `session_closed`.
    pub closed: bool,
    /// Set by `session_forked`: the source session and seq, and what the fork changed.
    pub forked_from: Option<(String, i64)>,
    pub overrides: Overrides,
    /// The dynamic (MCP) tools last journaled by `tools_seen`, and that list's digest.
    pub seen_tools: imbl::Vector<SeenTool>,
    pub seen_tools_digest: Option<String>,
    /// The session's schedules by key: pending ones and done one-time ones.
    pub schedules: std::collections::BTreeMap<String, crate::schedules::ScheduleState>,
    /// Set on a child session: who started it.
    pub parent: Option<crate::events::ParentRef>,
    /// Child sessions this session's `agent` tool calls started, by call id.
    pub children: std::collections::BTreeMap<CallId, String>,
    /// The summary of the turns the latest `context_compacted` replaced (with the earlier
    /// summaries it folded in), shown after the system prompt.
    pub summary: Option<String>,
    /// `context_compacted` events so far.
    pub compactions: u64,
    /// The pinned memory block (`memory_updated`): shown after the system prompt, never
    /// compacted.
    pub memory: String,
    /// The highest placeholder number the agent's guardrails gave each entity in this
    /// session's tool results (`guardrail_checked`): later ones number on from here.
    pub placeholders: std::collections::BTreeMap<String, usize>,
}

/// The principal of sessions whose journal names none.
pub const LOCAL_PRINCIPAL: &str = "local";

impl SessionState {
    /// The entries of the state's growing collections (transcript, client ids, decided
    /// approvals): what a snapshot of it costs, roughly.
    pub fn entries(&self) -> usize {
        self.transcript.len() + self.client_ids.len() + self.decided_approvals.len()
    }

    /// How many sessions delegated down to this one (0: a top-level session).
    pub fn depth(&self) -> u32 {
        self.parent.as_ref().map_or(0, |p| p.depth)
    }

    /// The delegation this session's model calls count against (docs/sessions.md): its own id
    /// for a child of a top-level session, its ancestors' delegation below that, `None` for a
    /// top-level session.
    pub fn delegation(&self, own_id: &str) -> Option<String> {
        let parent = self.parent.as_ref()?;
        Some(
            parent
                .delegation
                .clone()
                .unwrap_or_else(|| own_id.to_string()),
        )
    }

    /// The top-level message this session's sub-agent work counts against: its own running
    /// turn for a top-level session, its parent's for a child (`None` for a child from a
    /// journal older than per-message budgets, or a top-level session between turns).
    pub fn root_message(&self, own_id: &str) -> Option<crate::events::RootMessage> {
        match &self.parent {
            Some(parent) => parent.message.clone(),
            None => self.turn.as_ref().map(|turn| crate::events::RootMessage {
                session_id: own_id.to_string(),
                turn_seq: turn.started_seq,
            }),
        }
    }

    /// Who this session's model calls are charged to.
    pub fn principal(&self) -> &str {
        self.principal.as_deref().unwrap_or(LOCAL_PRINCIPAL)
    }

    /// The route model calls use: the fork's override, else the agent's.
    pub fn route<'a>(&'a self, agent_route: &'a str) -> &'a str {
        self.overrides.route.as_deref().unwrap_or(agent_route)
    }

    /// A dynamic tool of the journaled list, by the name the model saw.
    pub fn seen_tool(&self, name: &str) -> Option<&SeenTool> {
        self.seen_tools.iter().find(|t| t.name == name)
    }

    /// The schedules still to fire, earliest first.
    pub fn pending_schedules(&self) -> Vec<(&String, &crate::schedules::ScheduleState)> {
        let mut pending: Vec<_> = self
            .schedules
            .iter()
            .filter(|(_, s)| s.next_due_at.is_some())
            .collect();
        pending.sort_by_key(|(key, s)| (s.next_due_at, key.as_str()));
        pending
    }

    /// Approvals waiting for a decision in the current turn: calls, and held results.
    pub fn pending_approvals(&self) -> Vec<&CallState> {
        self.turn
            .iter()
            .flat_map(|t| t.calls.iter())
            .filter(|c| c.status.awaits_person())
            .collect()
    }

    /// Puts a person's message (steering, an interruption) at the head of the queue.
    fn queue_front(&mut self, text: String, attachments: Vec<Attachment>) {
        self.align_queue();
        self.queued.push_front(text);
        self.queued_from.push_front(None);
        self.queued_attachments.push_front(attachments);
    }

    /// A snapshot from before `queued_from` (or `queued_attachments`) existed has no source
    /// (or attachments) for its queued messages: they count as no schedule's, with none.
    fn align_queue(&mut self) {
        while self.queued_from.len() < self.queued.len() {
            self.queued_from.push_front(None);
        }
        self.queued_from.truncate(self.queued.len());
        while self.queued_attachments.len() < self.queued.len() {
            self.queued_attachments.push_front(Vec::new());
        }
        self.queued_attachments.truncate(self.queued.len());
    }

    /// Whether a firing of schedule `key` waits in the queue.
    pub fn schedule_queued(&self, key: &str) -> bool {
        self.queued_from.iter().any(|k| k.as_deref() == Some(key))
    }

    fn start_turn(&mut self, text: String, attachments: Vec<Attachment>) {
        self.transcript
            .push_back(TranscriptEntry::User { text, attachments });
        self.turn = Some(Turn {
            started_seq: self.last_seq,
            ..Turn::default()
        });
    }

    fn set_status(&mut self, call_id: &str, status: CallStatus) {
        if let Some(call) = self.turn.as_mut().and_then(|t| t.call_mut(call_id)) {
            call.status = status;
        }
    }

    /// `idle`, `running`, `awaiting_approval`, `failed` or `closed` (docs/api.md).
    pub fn status(&self) -> SessionStatus {
        if self.closed {
            return SessionStatus::Closed;
        }
        if self.failed.is_some() {
            return SessionStatus::Failed;
        }
        match &self.turn {
            None => SessionStatus::Idle,
            Some(turn) if turn.awaiting_approval() => SessionStatus::AwaitingApproval,
            Some(_) => SessionStatus::Running,
        }
    }
}

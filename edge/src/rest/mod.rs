//! REST handlers (docs/api.md): sessions, messages, events, approvals, cancel, state at a seq,
//! forks, agents. Inputs go to the session's actor, which journals them before anything
//! happens; reads come from the journal or the actor's folded state. One file per resource;
//! the views (JSON shapes of sessions and events) are shared here.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use stead_actors::{
    ApprovalScope, CallStatus, Input, MessageMode, Overrides, SessionEvent, SessionState,
};
use stead_persistence::{Event, NewEvent, NewSession, Session, SessionQuery, SessionStatus};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::Caller;
use crate::views::{
    AgentList, AgentView, ApprovalKind, BudgetNeed, Closed, Committed, Decided, ErrorBody,
    EventsPage, Forked, ForkedFrom, Inbox, InboxApproval, McpServerList, MessageAccepted,
    MessageWaited, ModelEntry, ModelList, PendingApproval, PurgedView, SessionCreated, SessionList,
    SessionView, StateView, Ticket, TokenIssued, ToolView, Usage,
};
use crate::wire::{EventView, SessionRow};
use crate::{ApiError, ApiJson, ApiPath, ApiQuery, AppState, ErrorCode};

mod agent_schedules;
mod agents;
mod approvals;
pub mod audit;
pub mod evals;
mod feedback;
mod memory;
mod messages;
pub mod project_settings;
pub mod projects;
mod replay;
mod schedules;
mod sessions;
pub mod spend;

pub use self::agent_schedules::*;
pub use self::agents::*;
pub use self::approvals::*;
pub use self::feedback::*;
pub use self::memory::*;
pub use self::messages::*;
pub use self::replay::*;
pub use self::schedules::*;
pub use self::sessions::*;

/// Largest user message (bytes).
pub const MAX_MESSAGE_BYTES: usize = 32 << 10;
/// Most events one `events` page returns.
pub(crate) const MAX_EVENTS_PAGE: u32 = 1000;
/// Largest metadata object of a session (bytes of JSON).
pub(crate) const MAX_METADATA_BYTES: usize = 16 << 10;

/// A name of a dataset or a project: 1 to `max` letters, digits, `.`, `_` and `-` (else a 422
/// that says what `what` names may be).
pub(crate) fn valid_name(name: &str, max: usize, what: &str) -> Result<(), ApiError> {
    let ok = (1..=max).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("a {what} name is 1 to {max} letters, digits, `.`, `_` and `-`"),
        ))
    }
}

/// `limit` within `1..=max`, or a 400.
pub(crate) fn page_limit(limit: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    match limit.unwrap_or(default) {
        n if (1..=max).contains(&n) => Ok(n),
        _ => Err(ApiError::new(
            ErrorCode::InvalidQuery,
            format!("`limit` is 1 to {max}"),
        )),
    }
}

/// Sends `input` to the session and answers the seq its events were committed at.
async fn commit(state: &AppState, id: Uuid, input: Input) -> Result<Json<Committed>, ApiError> {
    let seq = state.sessions.send(id, input).await?;
    Ok(Json(Committed {
        session_id: id,
        seq,
    }))
}

/// A session row as listed.
pub fn row_view(row: &Session) -> SessionRow {
    SessionRow::from(row)
}

/// The first page (500) of a session's children, newest first.
async fn children_page(
    state: &AppState,
    id: Uuid,
) -> Result<stead_persistence::SessionPage, ApiError> {
    Ok(state
        .store
        .list_sessions(&SessionQuery {
            // Children are in their parent's project, which the caller was checked for.
            scope: stead_persistence::Scope::Installation,
            agent: None,
            parent: Some(id),
            eval_run: None,
            status: None,
            limit: stead_persistence::MAX_PAGE,
            cursor: None,
        })
        .await?)
}

/// A session in full: the row plus what its folded state knows.
pub fn session_view(row: &Session, folded: &SessionState) -> SessionView {
    SessionView {
        row: SessionRow {
            status: folded.status(),
            last_seq: folded.last_seq.max(row.last_seq),
            ..row_view(row)
        },
        pending_approvals: pending_view(folded),
        usage: Usage {
            prompt_tokens: folded.usage.prompt_tokens,
            completion_tokens: folded.usage.completion_tokens,
        },
        queued_messages: folded.queued.len() as u64,
        forked_from: folded.forked_from.as_ref().map(|(session, at)| ForkedFrom {
            session_id: session.clone(),
            at: *at,
        }),
        failure: folded.failed.clone(),
    }
}

/// The approvals a state is waiting for.
pub fn pending_view(folded: &SessionState) -> Vec<PendingApproval> {
    let budget = folded
        .turn
        .as_ref()
        .and_then(|t| t.budget_wait.as_ref())
        .map(|wait| PendingApproval {
            kind: ApprovalKind::Budget,
            call_id: wait.call_id.clone(),
            tool: String::new(),
            arguments: serde_json::Value::Object(Default::default()),
            args_hash: String::new(),
            reason: wait.reason.clone(),
            budget: Some(BudgetNeed {
                name: wait.budget.clone(),
                needed_usd: wait.needed_usd,
            }),
            held: None,
        });
    let tools = folded
        .pending_approvals()
        .into_iter()
        .filter_map(|call| match &call.status {
            CallStatus::AwaitingApproval { args_hash, reason } => Some(PendingApproval {
                kind: ApprovalKind::Tool,
                call_id: call.call_id.clone(),
                tool: call.tool.clone(),
                arguments: call.arguments.clone(),
                args_hash: args_hash.clone(),
                reason: reason.clone(),
                budget: None,
                held: None,
            }),
            CallStatus::Held { result, checks } => Some(PendingApproval {
                kind: ApprovalKind::Guardrail,
                call_id: call.call_id.clone(),
                tool: call.tool.clone(),
                arguments: call.arguments.clone(),
                args_hash: stead_actors::args_hash(result),
                reason: checks
                    .iter()
                    .filter(|c| c.effect == stead_guardrails::results::Effect::Approve)
                    .map(|c| c.summary())
                    .collect::<Vec<_>>()
                    .join("; "),
                budget: None,
                held: Some(crate::views::HeldResult {
                    result: result.clone(),
                    checks: checks.clone(),
                }),
            }),
            _ => None,
        });
    budget.into_iter().chain(tools).collect()
}

/// A journal event as REST and WebSocket clients see it.
pub fn event_view(event: &Event) -> EventView {
    EventView::of(event)
}

/// Who a session's model calls are charged to when `caller` creates or forks it (operators
/// only: a session token cannot).
fn billed(caller: &crate::Principal) -> String {
    caller
        .limits_key()
        .unwrap_or_else(|| stead_actors::LOCAL_PRINCIPAL.to_string())
}

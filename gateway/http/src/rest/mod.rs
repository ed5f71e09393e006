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
use crate::openapi::{
    AgentList, Closed, Committed, Decided, ErrorBody, EventsPage, Forked, Inbox, McpServerList,
    MessageAccepted, MessageWaited, ModelList, SessionCreated, SessionList, SessionView, StateView,
    Ticket, TokenIssued,
};
use crate::wire::{EventView, SessionRow};
use crate::{ApiError, ApiJson, ApiPath, ApiQuery, AppState, ErrorCode};

mod agent_schedules;
mod agents;
mod approvals;
mod memory;
mod messages;
mod replay;
mod schedules;
mod sessions;

pub use self::agent_schedules::*;
pub use self::agents::*;
pub use self::approvals::*;
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

/// A session row as listed.
pub fn row_view(row: &Session) -> Value {
    json!(SessionRow::from(row))
}

/// The first page (500) of a session's children, newest first.
async fn children_page(
    state: &AppState,
    id: Uuid,
) -> Result<stead_persistence::SessionPage, ApiError> {
    Ok(state
        .store
        .list_sessions(&SessionQuery {
            agent: None,
            parent: Some(id),
            status: None,
            limit: stead_persistence::MAX_PAGE,
            cursor: None,
        })
        .await?)
}

/// A session in full: the row plus what its folded state knows.
pub fn session_view(row: &Session, folded: &SessionState) -> Value {
    let mut view = row_view(row);
    view["status"] = json!(folded.status());
    view["last_seq"] = json!(folded.last_seq.max(row.last_seq));
    view["pending_approvals"] = json!(pending_view(folded));
    view["usage"] = json!(folded.usage);
    view["queued_messages"] = json!(folded.queued.len());
    view["forked_from"] = match &folded.forked_from {
        Some((session, at)) => json!({ "session_id": session, "at": at }),
        None => Value::Null,
    };
    view["failure"] = json!(folded.failed);
    view
}

/// The approvals a state is waiting for.
pub fn pending_view(folded: &SessionState) -> Vec<Value> {
    folded
        .pending_approvals()
        .into_iter()
        .map(|call| {
            let (args_hash, reason) = match &call.status {
                CallStatus::AwaitingApproval { args_hash, reason } => (args_hash, reason),
                _ => unreachable!("pending approvals await approval"),
            };
            json!({
                "call_id": call.call_id,
                "tool": call.tool,
                "arguments": call.arguments,
                "args_hash": args_hash,
                "reason": reason,
            })
        })
        .collect()
}

/// A journal event as REST and WebSocket clients see it.
pub fn event_view(event: &Event) -> Value {
    json!(EventView::of(event))
}

/// Who a session's model calls are charged to when `caller` creates or forks it (operators
/// only: a session token cannot).
fn billed(caller: &crate::Principal) -> String {
    caller
        .limits_key()
        .unwrap_or_else(|| stead_actors::LOCAL_PRINCIPAL.to_string())
}

//! The audit trail (docs/audit.md): a route layer that records every state-changing request
//! that succeeded — who (the principal the `Caller` extractor authenticated), what (the
//! operation and the path it named), when, from where (the peer address), in which project,
//! and the facts its handler adds as an [`AuditNote`] — append-only, in the database. Never a
//! body, a query string or a secret. Conversation and inference calls (messages, the gateway's
//! endpoints, `/mcp`'s protocol, WebSocket tickets) are left out: the journal and the request
//! log hold them. Decisions sent over a WebSocket are recorded by the connection ([`append`]).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;
use stead_persistence::audit::AuditEntry;
use uuid::Uuid;

use crate::{AppState, Principal};

/// Where the `Caller` extractor leaves the principal it authenticated, for the audit layer.
#[derive(Clone, Default)]
pub struct AuditSlot(Arc<OnceLock<Principal>>);

impl AuditSlot {
    pub(crate) fn fill(&self, principal: &Principal) {
        let _ = self.0.set(principal.clone());
    }
}

/// What a handler adds to the record of its act (a response extension): the project the act
/// was in, when the path does not say, and a few facts (ids made, a decision's outcome).
#[derive(Clone, Debug)]
pub struct AuditNote {
    pub project: Option<Uuid>,
    pub details: Value,
}

impl Default for AuditNote {
    /// No project named, no facts (`{}`).
    fn default() -> Self {
        AuditNote {
            project: None,
            details: Value::Object(Default::default()),
        }
    }
}

impl AuditNote {
    /// The note as a response part: `project` (when the path does not name it) and the facts.
    pub fn new<'a>(
        project: Option<Uuid>,
        facts: impl IntoIterator<Item = (&'a str, Value)>,
    ) -> axum::Extension<AuditNote> {
        let details = facts
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect::<serde_json::Map<_, _>>();
        axum::Extension(AuditNote {
            project,
            details: Value::Object(details),
        })
    }
}

/// A handler's answer with the note for its act's record.
pub type Noted<T> = (axum::Extension<AuditNote>, T);

/// Operations that change state but are not audited (their own records hold them).
const NOT_AUDITED: &[(&str, &str)] = &[
    ("POST", "/v1/sessions/{id}/messages"),
    ("POST", "/v1/sessions/{id}/ticket"),
    ("POST", "/v1/collections/{name}/query"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/embeddings"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/responses"),
    ("POST", "/mcp"),
    ("DELETE", "/mcp"),
];

/// Whether `method path` (a route template) is recorded when it succeeds.
pub fn audited(method: &Method, template: &str) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) && !NOT_AUDITED
        .iter()
        .any(|(m, p)| *m == method.as_str() && *p == template)
}

/// The route layer.
pub async fn record(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let template = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let Some(template) = template.filter(|t| audited(request.method(), t)) else {
        return next.run(request).await;
    };
    let slot = AuditSlot::default();
    request.extensions_mut().insert(slot.clone());
    let action = format!("{} {template}", request.method());
    let target = request.uri().path().to_owned();
    let source = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string());
    let response = next.run(request).await;
    let Some(principal) = slot.0.get() else {
        return response; // refused before it was authenticated: no act
    };
    if !response.status().is_success() {
        return response;
    }
    let note = response
        .extensions()
        .get::<AuditNote>()
        .cloned()
        .unwrap_or_default();
    let project = match note.project {
        Some(project) => project,
        None => project_of(&state, principal, &target).await,
    };
    let entry = AuditEntry {
        id: Uuid::now_v7(),
        at: chrono::Utc::now(),
        project_id: project,
        actor: principal.name().to_string(),
        action,
        target,
        status: response.status().as_u16(),
        source,
        details: note.details,
    };
    append(&state, entry).await;
    response
}

/// The project an act was in: a session's (from the path), else the caller's.
async fn project_of(state: &AppState, principal: &Principal, target: &str) -> Uuid {
    let session = target
        .strip_prefix("/v1/sessions/")
        .and_then(|rest| rest.split('/').next())
        .and_then(|id| Uuid::try_parse(id).ok());
    if let Some(id) = session {
        if let Ok(row) = state.store.get_session(id).await {
            return row.project_id;
        }
    }
    principal.project()
}

/// Appends one act; a failure is logged (the act itself happened).
pub async fn append(state: &AppState, entry: AuditEntry) {
    if let Err(error) = state.store.append_audit(&entry).await {
        tracing::warn!(%error, action = %entry.action, "an act could not be audited");
    }
}

/// The record of a decision or a cancel sent over a session's WebSocket (messages are not
/// audited: the journal holds them).
pub async fn ws_act(
    state: &AppState,
    session: Uuid,
    caller: &Principal,
    source: Option<String>,
    input: &stead_actors::Input,
) -> Option<AuditEntry> {
    use stead_actors::Input;
    let (action, target, details) = match input {
        Input::Decision {
            call_id,
            approved,
            overspend_usd,
            reason,
            ..
        } => (
            "WS approval",
            format!("/v1/sessions/{session}/approvals/{call_id}"),
            [
                ("approved".to_string(), Value::from(*approved)),
                ("overspend_usd".to_string(), Value::from(*overspend_usd)),
                ("reason".to_string(), Value::from(reason.clone())),
            ]
            .into_iter()
            .collect(),
        ),
        Input::Cancel { .. } => (
            "WS cancel",
            format!("/v1/sessions/{session}/cancel"),
            serde_json::Map::new(),
        ),
        _ => return None,
    };
    let project = match state.store.get_session(session).await {
        Ok(row) => row.project_id,
        Err(_) => caller.project(),
    };
    Some(AuditEntry {
        id: Uuid::now_v7(),
        at: chrono::Utc::now(),
        project_id: project,
        actor: caller.name().to_string(),
        action: action.into(),
        target,
        status: 200,
        source,
        details: Value::Object(details),
    })
}

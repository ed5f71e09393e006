//! The one error type at the HTTP edge, and the extractors that turn every rejection (bad JSON,
//! wrong types, oversized bodies, bad ids and queries) into it.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::json;
use stead_actors::session::SessionError;
use stead_actors::Refusal;

use crate::error_code::ErrorCode;

/// A stable machine-readable [`ErrorCode`] (which fixes the status), rendered as
/// `{"error":{"code","message"}}`. Messages are for people and never carry internals or secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// For `session_elsewhere`: the node that holds the session's lease, which a cluster
    /// forwards the request to (never shown to the caller).
    pub owner: Option<String>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            owner: None,
        }
    }

    /// The HTTP status of this error's code.
    pub fn status(&self) -> StatusCode {
        self.code.status()
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::NotFound, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::NotReady, message)
    }

    pub fn session_not_found() -> Self {
        ApiError::new(ErrorCode::SessionNotFound, "no such session")
    }

    /// Something failed inside; the details go to the log, not to the caller.
    pub fn internal(context: &str, error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "{context}");
        ApiError::new(
            ErrorCode::Internal,
            format!("{context}; see the server log"),
        )
    }
}

impl From<SessionError> for ApiError {
    fn from(error: SessionError) -> Self {
        match error {
            SessionError::NotFound => ApiError::session_not_found(),
            // Only after the registry's retries: nothing was applied.
            SessionError::Passivating => {
                ApiError::unavailable("the session is passivating; send again")
            }
            // The owner (a node name, often a host name) goes to the log, not to the caller.
            SessionError::HeldElsewhere(owner) => {
                tracing::info!(%owner, "a request for a session active on another node");
                ApiError {
                    owner: Some(owner),
                    ..ApiError::new(
                        ErrorCode::SessionElsewhere,
                        "the session is active on another node; try again later",
                    )
                }
            }
            SessionError::UnknownAgent(agent) => ApiError::new(
                ErrorCode::AgentNotConfigured,
                format!("the session's agent `{agent}` is not configured on this server"),
            ),
            SessionError::Refused(refusal) => refusal_error(refusal),
            SessionError::TooLarge(message) => ApiError::new(ErrorCode::EventTooLarge, message),
            SessionError::Journal(message) => ApiError::internal("the session failed", message),
            SessionError::Stopped => {
                ApiError::internal("the session failed", "the session actor stopped")
            }
            SessionError::KeptPassivating => {
                ApiError::internal("the session failed", "the session actor kept passivating")
            }
            // Nothing was applied: the caller may send it again (the same `client_id` is safe).
            SessionError::Storage(message) => {
                tracing::error!(error = %message, "the database could not be used");
                ApiError::unavailable(
                    "the database is unavailable (full, down or failing): nothing of this \
                     request was applied; send it again later",
                )
            }
        }
    }
}

impl From<stead_persistence::Error> for ApiError {
    fn from(error: stead_persistence::Error) -> Self {
        use stead_persistence::Error;
        match error {
            Error::SessionNotFound(_) => ApiError::session_not_found(),
            Error::EventTooLarge { .. } => {
                ApiError::new(ErrorCode::EventTooLarge, error.to_string())
            }
            Error::InvalidInput(message) => ApiError::new(ErrorCode::MalformedRequest, message),
            // A database that is down, full or failing: the request may be sent again.
            other if !other.is_permanent() => {
                tracing::error!(error = %other, "the database could not be used");
                ApiError::unavailable(
                    "the database is unavailable (full, down or failing): nothing of this \
                     request was applied; send it again later",
                )
            }
            other => ApiError::internal("the database failed", other),
        }
    }
}

impl From<stead_actors::replay::ReplayError> for ApiError {
    fn from(error: stead_actors::replay::ReplayError) -> Self {
        use stead_actors::replay::ReplayError;
        match error {
            ReplayError::Store(e) => e.into(),
            ReplayError::Compacted { .. } => ApiError::new(ErrorCode::Compacted, error.to_string()),
            ReplayError::SeqOutOfRange { .. } => {
                ApiError::new(ErrorCode::SeqOutOfRange, error.to_string())
            }
            ReplayError::Invalid(message) => ApiError::internal("the replay failed", message),
        }
    }
}

/// The code and status of each refusal (also used for WebSocket error frames).
pub fn refusal_error(refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::DuplicateClientId => ApiError::new(
            ErrorCode::DuplicateClientId,
            "a message with this client_id was already applied",
        ),
        Refusal::NoSuchApproval => ApiError::new(
            ErrorCode::ApprovalNotFound,
            "no approval with this call id is pending in this session",
        ),
        Refusal::AlreadyDecided => ApiError::new(
            ErrorCode::AlreadyDecided,
            "this approval was already decided",
        ),
        Refusal::ArgsHashMismatch => ApiError::new(
            ErrorCode::ArgsHashMismatch,
            "the arguments changed since this approval was requested",
        ),
        Refusal::Stale => ApiError::new(ErrorCode::Stale, "that call is no longer in flight"),
        Refusal::NothingToCancel => {
            ApiError::new(ErrorCode::NothingToCancel, "no turn is in progress")
        }
        Refusal::Ended => ApiError::new(
            ErrorCode::SessionEnded,
            "the session is closed or failed and takes no more input",
        ),
        Refusal::OperatorRequired => ApiError::new(
            ErrorCode::OperatorRequired,
            "only an operator may approve this tool's calls (approver = \"operator\"); a session \
             token may reject them",
        ),
        Refusal::SpendRequired => ApiError::new(
            ErrorCode::Forbidden,
            "a budget approval allows spending: only the installation's keys and the project's \
             admin keys may decide it",
        ),
        Refusal::NotABudgetApproval => ApiError::new(
            ErrorCode::InvalidRequest,
            "overspend_usd applies to budget approvals only; this is a tool call's approval",
        ),
        Refusal::Busy => ApiError::new(
            ErrorCode::Busy,
            "a turn is running and the message's mode is drop_if_busy; nothing was journaled",
        ),
        Refusal::InvalidSchedule(why) => ApiError::new(ErrorCode::InvalidSchedule, why),
        Refusal::ScheduleExists => ApiError::new(
            ErrorCode::ScheduleConflict,
            "this schedule exists already, with this definition",
        ),
        Refusal::ScheduleConflict => ApiError::new(
            ErrorCode::ScheduleConflict,
            "another schedule of this session holds this key; send `replace: true` to redefine it",
        ),
        Refusal::TooManySchedules(max) => ApiError::new(
            ErrorCode::TooManySchedules,
            format!("the session holds {max} pending schedules (schedules.max_per_session)"),
        ),
        Refusal::NoSuchSchedule => ApiError::new(
            ErrorCode::ScheduleNotFound,
            "no schedule with this key in this session",
        ),
        Refusal::NothingDue => ApiError::new(ErrorCode::Stale, "no schedule of the session is due"),
        Refusal::FiringLimit(until) => ApiError::new(
            ErrorCode::Stale,
            format!(
                "the session's schedules fired schedules.max_firings_per_hour times in the last \
                 hour; the next may fire at {until}"
            ),
        ),
        Refusal::QueueFull => ApiError::new(
            ErrorCode::QueueFull,
            "the session holds as many queued messages as it may (sessions.max_queued_messages); \
             send again when its turn has moved on",
        ),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        let mut response = (self.status(), Json(body)).into_response();
        if let Some(owner) = self.owner {
            response
                .extensions_mut()
                .insert(crate::cluster::Elsewhere(owner));
        }
        response
    }
}

/// A JSON body whose every rejection is an [`ApiError`]: malformed JSON → 400 `invalid_json`,
/// wrong or missing fields → 422 `invalid_request`, over the body limit → 413
/// `payload_too_large`, no JSON content type → 415 `unsupported_media_type`.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // Bodies are JSON objects: serde would also read a struct from an array.
        let value = match Json::<serde_json::Value>::from_request(req, state).await {
            Ok(Json(value)) => value,
            Err(rejection) => return Err(json_rejection(rejection)),
        };
        if !value.is_object() {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "the body must be a JSON object",
            ));
        }
        serde_json::from_value(value)
            .map(ApiJson)
            .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.to_string()))
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    match rejection {
        JsonRejection::JsonDataError(e) => ApiError::new(ErrorCode::InvalidRequest, e.body_text()),
        JsonRejection::JsonSyntaxError(e) => ApiError::new(ErrorCode::InvalidJson, e.body_text()),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "send the body as JSON with `Content-Type: application/json`",
        ),
        other if status == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("the request body is too large: {}", other.body_text()),
        ),
        other => ApiError::new(ErrorCode::InvalidBody, other.body_text()),
    }
}

/// Path parameters; a bad one (not a UUID) is 400 `invalid_id`.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(ApiPath(value)),
            Err(rejection) => Err(path_rejection(rejection)),
        }
    }
}

fn path_rejection(rejection: PathRejection) -> ApiError {
    ApiError::new(ErrorCode::InvalidId, rejection.body_text())
}

/// Query parameters; a bad one is 400 `invalid_query`.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(ApiQuery(value)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::new(ErrorCode::InvalidQuery, rejection.body_text())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn renders_the_error_envelope() {
        let response = ApiError::not_found("no such session").into_response();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let bytes = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            body,
            json!({ "error": { "code": "not_found", "message": "no such session" } })
        );
    }
}

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

/// A status and a stable machine-readable `code`, rendered as `{"error":{"code","message"}}`.
/// Messages are for people and never carry internals or secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", message)
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::CONFLICT, code, message)
    }

    pub fn session_not_found() -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "session_not_found",
            "no such session",
        )
    }

    /// Something failed inside; the details go to the log, not to the caller.
    pub fn internal(context: &str, error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "{context}");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("{context}; see the server log"),
        )
    }
}

impl From<SessionError> for ApiError {
    fn from(error: SessionError) -> Self {
        match error {
            SessionError::NotFound => ApiError::session_not_found(),
            SessionError::HeldElsewhere(owner) => ApiError::conflict(
                "session_elsewhere",
                format!("the session is active on another node ({owner}); try that node or later"),
            ),
            SessionError::UnknownAgent(agent) => ApiError::conflict(
                "agent_not_configured",
                format!("the session's agent `{agent}` is not configured on this server"),
            ),
            SessionError::Refused(refusal) => refusal_error(refusal),
            SessionError::TooLarge(message) => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "event_too_large", message)
            }
            SessionError::Journal(message) => ApiError::internal("the session failed", message),
        }
    }
}

impl From<stead_persistence::Error> for ApiError {
    fn from(error: stead_persistence::Error) -> Self {
        use stead_persistence::Error;
        match error {
            Error::SessionNotFound(_) => ApiError::session_not_found(),
            Error::EventTooLarge { .. } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "event_too_large",
                error.to_string(),
            ),
            Error::InvalidInput(message) => ApiError::bad_request("invalid_request", message),
            other => ApiError::internal("the database failed", other),
        }
    }
}

impl From<stead_actors::replay::ReplayError> for ApiError {
    fn from(error: stead_actors::replay::ReplayError) -> Self {
        use stead_actors::replay::ReplayError;
        match error {
            ReplayError::Store(e) => e.into(),
            ReplayError::Compacted { .. } => {
                ApiError::new(StatusCode::GONE, "compacted", error.to_string())
            }
            ReplayError::SeqOutOfRange { .. } => {
                ApiError::unprocessable("seq_out_of_range", error.to_string())
            }
            ReplayError::Invalid(message) => ApiError::internal("the replay failed", message),
        }
    }
}

/// The code and status of each refusal (also used for WebSocket error frames).
pub fn refusal_error(refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::DuplicateClientId => ApiError::conflict(
            "duplicate_client_id",
            "a message with this client_id was already applied",
        ),
        Refusal::NoSuchApproval => ApiError::new(
            StatusCode::NOT_FOUND,
            "approval_not_found",
            "no approval with this call id is pending in this session",
        ),
        Refusal::AlreadyDecided => {
            ApiError::conflict("already_decided", "this approval was already decided")
        }
        Refusal::ArgsHashMismatch => ApiError::conflict(
            "args_hash_mismatch",
            "the arguments changed since this approval was requested",
        ),
        Refusal::Stale => ApiError::conflict("stale", "that call is no longer in flight"),
        Refusal::NothingToCancel => {
            ApiError::conflict("nothing_to_cancel", "no turn is in progress")
        }
        Refusal::Ended => ApiError::conflict(
            "session_ended",
            "the session is closed or failed and takes no more input",
        ),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        (self.status, Json(body)).into_response()
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
            return Err(ApiError::unprocessable(
                "invalid_request",
                "the body must be a JSON object",
            ));
        }
        serde_json::from_value(value)
            .map(ApiJson)
            .map_err(|e| ApiError::unprocessable("invalid_request", e.to_string()))
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    match rejection {
        JsonRejection::JsonDataError(e) => {
            ApiError::unprocessable("invalid_request", e.body_text())
        }
        JsonRejection::JsonSyntaxError(e) => ApiError::bad_request("invalid_json", e.body_text()),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON with `Content-Type: application/json`",
        ),
        other if status == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            status,
            "payload_too_large",
            format!("the request body is too large: {}", other.body_text()),
        ),
        other => ApiError::bad_request("invalid_body", other.body_text()),
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
    ApiError::bad_request("invalid_id", rejection.body_text())
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
    ApiError::bad_request("invalid_query", rejection.body_text())
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

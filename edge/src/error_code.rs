//! Every error code the HTTP edge answers with, and its HTTP status, in one place. A code string
//! may stand for different statuses on different APIs (`invalid_request` is 422 on the session
//! API and 400 on `/v1/chat/completions`, as OpenAI answers): each such pair is a variant of its
//! own, so a handler names a variant and can never pair a code with a wrong status. The table in
//! `docs/api.md` is checked against [`ErrorCode::ALL`] by a test.

use axum::http::StatusCode;

macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident = ($status:ident, $code:literal),)*) => {
        /// A stable, machine-readable error code with its HTTP status.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)*
        }

        impl ErrorCode {
            /// Every code, in the order of the table in `docs/api.md`.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The `code` clients see.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)*
                }
            }

            /// The HTTP status the code is answered with.
            pub fn status(self) -> StatusCode {
                match self {
                    $(ErrorCode::$variant => StatusCode::$status,)*
                }
            }
        }
    };
}

error_codes! {
    /// The body is not JSON (also a WebSocket frame that is not JSON).
    InvalidJson = (BAD_REQUEST, "invalid_json"),
    /// A path id is not a UUID.
    InvalidId = (BAD_REQUEST, "invalid_id"),
    /// A bad query parameter.
    InvalidQuery = (BAD_REQUEST, "invalid_query"),
    /// The body could not be read.
    InvalidBody = (BAD_REQUEST, "invalid_body"),
    /// A request refused with 400 as OpenAI's API refuses it (`/v1/chat/completions`), or a
    /// payload the database refuses.
    MalformedRequest = (BAD_REQUEST, "invalid_request"),
    /// A bad `x-stead-metadata` header.
    InvalidMetadata = (BAD_REQUEST, "invalid_metadata"),
    /// The route's last target refused the request as invalid.
    UpstreamRejected = (BAD_REQUEST, "upstream_rejected"),
    /// A WebSocket frame of a known type with wrong fields.
    InvalidFrame = (BAD_REQUEST, "invalid_frame"),
    /// A WebSocket frame type the protocol does not have.
    UnknownFrameType = (BAD_REQUEST, "unknown_frame_type"),
    /// A binary WebSocket frame.
    UnsupportedFrame = (BAD_REQUEST, "unsupported_frame"),
    /// API keys are configured and none was sent.
    MissingCredentials = (UNAUTHORIZED, "missing_credentials"),
    /// The key or token is not valid.
    InvalidCredentials = (UNAUTHORIZED, "invalid_credentials"),
    /// A session token past its expiry.
    TokenExpired = (UNAUTHORIZED, "token_expired"),
    /// A session token used for another session or an operator endpoint.
    Forbidden = (FORBIDDEN, "forbidden"),
    /// A session token approving a call of a tool whose `approver` is `operator`.
    OperatorRequired = (FORBIDDEN, "operator_required"),
    /// An open server (no API keys) asked under a `Host` that is not loopback or allowed.
    HostNotAllowed = (FORBIDDEN, "host_not_allowed"),
    /// An open server asked by a page of another site (`Origin`).
    OriginNotAllowed = (FORBIDDEN, "origin_not_allowed"),
    /// No such endpoint.
    NotFound = (NOT_FOUND, "not_found"),
    /// No such session.
    SessionNotFound = (NOT_FOUND, "session_not_found"),
    /// No approval with that call id is pending.
    ApprovalNotFound = (NOT_FOUND, "approval_not_found"),
    /// No schedule with that key in the session.
    ScheduleNotFound = (NOT_FOUND, "schedule_not_found"),
    /// No knowledge collection of that name.
    CollectionNotFound = (NOT_FOUND, "collection_not_found"),
    /// No document of that id in the collection.
    DocumentNotFound = (NOT_FOUND, "document_not_found"),
    /// No evaluation dataset of that name.
    DatasetNotFound = (NOT_FOUND, "dataset_not_found"),
    /// No evaluation run of that id.
    EvalNotFound = (NOT_FOUND, "eval_not_found"),
    /// No project of that name (or one the caller's key does not belong to).
    ProjectNotFound = (NOT_FOUND, "project_not_found"),
    /// No live key of that id in the project.
    KeyNotFound = (NOT_FOUND, "key_not_found"),
    /// No artifact of that id (or one the caller may not read).
    ArtifactNotFound = (NOT_FOUND, "artifact_not_found"),
    /// `/v1/chat/completions`: no route of that name.
    ModelNotFound = (NOT_FOUND, "model_not_found"),
    /// The endpoint does not take that method.
    MethodNotAllowed = (METHOD_NOT_ALLOWED, "method_not_allowed"),
    /// A second decision on an approval.
    AlreadyDecided = (CONFLICT, "already_decided"),
    /// A decision bound to other arguments than the pending ones.
    ArgsHashMismatch = (CONFLICT, "args_hash_mismatch"),
    /// A message whose `client_id` was already applied.
    DuplicateClientId = (CONFLICT, "duplicate_client_id"),
    /// A `drop_if_busy` message while a turn runs.
    Busy = (CONFLICT, "busy"),
    /// Another schedule holds the key (send `replace: true` to redefine it).
    ScheduleConflict = (CONFLICT, "schedule_conflict"),
    /// A collection of that name exists with another embedding route.
    CollectionExists = (CONFLICT, "collection_exists"),
    /// An evaluation dataset of that name exists.
    DatasetExists = (CONFLICT, "dataset_exists"),
    /// A project of that name exists.
    ProjectExists = (CONFLICT, "project_exists"),
    /// Embeddings of another model or dimension than the collection holds.
    EmbeddingMismatch = (CONFLICT, "embedding_mismatch"),
    /// Cancel with no turn in progress.
    NothingToCancel = (CONFLICT, "nothing_to_cancel"),
    /// Input to a closed or failed session.
    SessionEnded = (CONFLICT, "session_ended"),
    /// A result for a call no longer in flight.
    Stale = (CONFLICT, "stale"),
    /// The session's agent is no longer configured.
    AgentNotConfigured = (CONFLICT, "agent_not_configured"),
    /// The session's lease is held by another node.
    SessionElsewhere = (CONFLICT, "session_elsewhere"),
    /// Below a compacted session's cut.
    Compacted = (GONE, "compacted"),
    /// A body over the limit.
    PayloadTooLarge = (PAYLOAD_TOO_LARGE, "payload_too_large"),
    /// A message text over 32 KiB.
    MessageTooLarge = (PAYLOAD_TOO_LARGE, "message_too_large"),
    /// An event over `database.max_event_bytes`.
    EventTooLarge = (PAYLOAD_TOO_LARGE, "event_too_large"),
    /// A WebSocket frame over the frame limit.
    FrameTooLarge = (PAYLOAD_TOO_LARGE, "frame_too_large"),
    /// An upload over `artifacts.max_bytes`.
    ArtifactTooLarge = (PAYLOAD_TOO_LARGE, "artifact_too_large"),
    /// A `Range` outside the artifact (or not one `bytes=` range).
    RangeNotSatisfiable = (RANGE_NOT_SATISFIABLE, "range_not_satisfiable"),
    /// A document over `knowledge.max_document_bytes`.
    DocumentTooLarge = (PAYLOAD_TOO_LARGE, "document_too_large"),
    /// A body without `Content-Type: application/json`.
    UnsupportedMediaType = (UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
    /// Wrong or missing fields, unknown fields, empty text (the session API).
    InvalidRequest = (UNPROCESSABLE_ENTITY, "invalid_request"),
    /// An agent name that is not configured.
    UnknownAgent = (UNPROCESSABLE_ENTITY, "unknown_agent"),
    /// A route name that is not configured (fork overrides).
    UnknownRoute = (UNPROCESSABLE_ENTITY, "unknown_route"),
    /// `at` outside `1..=last_seq`.
    SeqOutOfRange = (UNPROCESSABLE_ENTITY, "seq_out_of_range"),
    /// A schedule that cannot be used: no kind or two, a bad cron expression or time zone, an
    /// `at` in the past, an interval under the minimum.
    InvalidSchedule = (UNPROCESSABLE_ENTITY, "invalid_schedule"),
    /// The session holds `schedules.max_per_session` pending schedules.
    TooManySchedules = (UNPROCESSABLE_ENTITY, "too_many_schedules"),
    /// A bad collection name, or an embedding route that is not configured.
    InvalidCollection = (UNPROCESSABLE_ENTITY, "invalid_collection"),
    /// A document with empty text, a bad id or metadata that is not an object of scalars.
    InvalidDocument = (UNPROCESSABLE_ENTITY, "invalid_document"),
    /// A knowledge query with neither text nor vector (or both), a bad `top_k` or `mode`.
    InvalidSearch = (UNPROCESSABLE_ENTITY, "invalid_search"),
    /// A query vector of another dimension than the collection's.
    WrongDimension = (UNPROCESSABLE_ENTITY, "wrong_dimension"),
    /// A filter on a metadata field no document of the collection has.
    UnknownFilterField = (UNPROCESSABLE_ENTITY, "unknown_filter_field"),
    /// A `block` guardrail of the route found what it looks for (docs/guardrails.md).
    GuardrailBlocked = (UNPROCESSABLE_ENTITY, "guardrail_blocked"),
    /// The request shows images and no model of its route sees them (docs/multimodal.md).
    ImagesUnsupported = (UNPROCESSABLE_ENTITY, "images_unsupported"),
    /// A per-key or per-route rate limit.
    RateLimited = (TOO_MANY_REQUESTS, "rate_limited"),
    /// The key's budget is spent.
    BudgetExceeded = (TOO_MANY_REQUESTS, "budget_exceeded"),
    /// A WebSocket client that fell too far behind.
    TooSlow = (TOO_MANY_REQUESTS, "too_slow"),
    /// A message while a turn runs and `sessions.max_queued_messages` are queued.
    QueueFull = (TOO_MANY_REQUESTS, "queue_full"),
    /// A session already holds `server.max_websockets_per_session` WebSockets.
    TooManyWebSockets = (TOO_MANY_REQUESTS, "too_many_websockets"),
    /// A new `/mcp` session over the live sessions' limits (in all, or of this credential).
    TooManyMcpSessions = (TOO_MANY_REQUESTS, "too_many_mcp_sessions"),
    /// A bug or a database failure (details in the log only).
    Internal = (INTERNAL_SERVER_ERROR, "internal"),
    /// Every target of the route failed.
    UpstreamFailed = (BAD_GATEWAY, "upstream_failed"),
    /// No target of the route is available.
    Unavailable = (SERVICE_UNAVAILABLE, "unavailable"),
    /// `/readyz` while the database does not answer.
    NotReady = (SERVICE_UNAVAILABLE, "not_ready"),
    /// The server holds `server.max_connections` connections (answered on the raw socket).
    Overloaded = (SERVICE_UNAVAILABLE, "overloaded"),
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<stead_router::RouterErrorCode> for ErrorCode {
    /// How the model router's refusals read on `/v1/chat/completions`.
    fn from(code: stead_router::RouterErrorCode) -> Self {
        use stead_router::RouterErrorCode as Router;
        match code {
            Router::UnknownRoute => ErrorCode::ModelNotFound,
            Router::RateLimited => ErrorCode::RateLimited,
            Router::BudgetExceeded => ErrorCode::BudgetExceeded,
            Router::UpstreamRejected => ErrorCode::UpstreamRejected,
            Router::Unavailable => ErrorCode::Unavailable,
            Router::UpstreamFailed => ErrorCode::UpstreamFailed,
            Router::GuardrailBlocked => ErrorCode::GuardrailBlocked,
            Router::ImagesUnsupported => ErrorCode::ImagesUnsupported,
            Router::Forbidden => ErrorCode::Forbidden,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_string_names_one_status_per_variant_and_no_pair_repeats() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(
                seen.insert((code.status(), code.as_str())),
                "{code:?} repeats another variant"
            );
            assert!(code.status().is_client_error() || code.status().is_server_error());
        }
    }

    /// `docs/api.md`'s error table: each row's status and codes are variants, and every
    /// variant is documented (the WebSocket-only codes in the protocol section).
    #[test]
    fn the_documented_error_table_matches_the_codes() {
        let doc_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.md");
        let doc = std::fs::read_to_string(doc_path).expect("docs/api.md");
        let table = doc
            .split("\n## Errors")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("an `## Errors` section");
        let mut documented = std::collections::HashSet::new();
        for row in table
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| status"))
        {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let status: u16 = cells[1]
                .parse()
                .unwrap_or_else(|_| panic!("status in {row}"));
            for code in cells[2].split('/').map(|c| c.trim().trim_matches('`')) {
                let variant = ErrorCode::ALL
                    .iter()
                    .find(|v| v.as_str() == code && v.status().as_u16() == status)
                    .unwrap_or_else(|| {
                        panic!("docs/api.md lists {status} `{code}`, no variant has it")
                    });
                documented.insert(*variant);
            }
        }
        for code in ErrorCode::ALL {
            assert!(
                documented.contains(code) || doc.contains(&format!("`{}`", code.as_str())),
                "{code:?} (`{}`, {}) is not in docs/api.md",
                code.as_str(),
                code.status()
            );
        }
    }
}

//! `/v1/artifacts` (docs/artifacts.md): uploads kept as content-addressed blobs in the
//! artifact store (`stead-artifacts`), each with a row naming its session (purged with it) or
//! its project. The type is read from the bytes, never taken from the client; a download
//! answers single byte ranges and carries `nosniff`, so a browser never runs an upload as a
//! page.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use stead_actors::Attachment;
use stead_artifacts::{ArtifactError, BlobStore};
use stead_persistence::Artifact;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::Caller;
use crate::views::ErrorBody;
use crate::wire::AttachmentRef;
use crate::{ApiError, ApiPath, ApiQuery, AppState, ErrorCode};

/// The artifact store the server writes to, and its size limit.
pub struct Artifacts {
    pub blobs: BlobStore,
    /// Largest upload, in bytes.
    pub max_bytes: usize,
}

/// An artifact as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ArtifactView {
    pub id: Uuid,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    pub size: i64,
    /// As read from the bytes (docs/artifacts.md, "Types").
    pub content_type: String,
    /// The session it belongs to; absent: its project's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl From<Artifact> for ArtifactView {
    fn from(a: Artifact) -> Self {
        ArtifactView {
            id: a.id,
            sha256: a.sha256,
            size: a.size,
            content_type: a.content_type,
            session_id: a.session_id,
            created_at: a.created_at,
        }
    }
}

/// A session's artifacts, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ArtifactList {
    pub artifacts: Vec<ArtifactView>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UploadQuery {
    /// The session the artifact belongs to (purged with it). A session token must name its
    /// own; without one the artifact is the caller's project's (operators only).
    session_id: Option<Uuid>,
}

fn store(state: &AppState) -> Result<&Arc<Artifacts>, ApiError> {
    state
        .artifacts
        .as_ref()
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, "this server keeps no artifacts"))
}

fn store_failed(error: ArtifactError) -> ApiError {
    match error {
        ArtifactError::NotFound(_) => {
            ApiError::internal("an artifact's blob is missing from the store", error)
        }
        other => {
            tracing::error!(error = %other, "the artifact store failed");
            ApiError::unavailable("the artifact store is unavailable; send the request again")
        }
    }
}

fn not_found(id: Uuid) -> ApiError {
    ApiError::new(ErrorCode::ArtifactNotFound, format!("no artifact {id}"))
}

/// Uploads the request body as an artifact.
#[utoipa::path(post, path = "/v1/artifacts", params(UploadQuery), request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The bytes (or a `multipart/form-data` body with the bytes in its `file` field); `Content-Type` is a hint only (the type is read from them)"), responses((status = 201, body = ArtifactView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody), (status = 503, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn upload(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<UploadQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<ArtifactView>), ApiError> {
    let artifacts = store(&state)?;
    let project = match query.session_id {
        Some(session) => {
            caller
                .require_session(state.store.as_ref(), session)
                .await?;
            state.store.get_session(session).await?.project_id
        }
        None => {
            caller.require_operator()?;
            caller.project()
        }
    };
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                ErrorCode::ArtifactTooLarge,
                format!("an artifact may hold {} bytes", artifacts.max_bytes),
            )
        } else {
            ApiError::new(ErrorCode::InvalidBody, rejection.body_text())
        }
    })?;
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    // A form upload (`multipart/form-data`): the artifact is its `file` field.
    let (body, declared) = match declared.and_then(|d| multer::parse_boundary(d).ok()) {
        Some(boundary) => file_field(body, boundary).await?,
        None => (body, declared.map(str::to_string)),
    };
    if body.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "an artifact needs at least one byte",
        ));
    }
    let content_type = stead_artifacts::content_type(declared.as_deref(), &body);
    let stored = artifacts.blobs.put(body).await.map_err(store_failed)?;
    let artifact = Artifact {
        id: Uuid::now_v7(),
        sha256: stored.sha256,
        size: stored.size as i64,
        content_type,
        session_id: query.session_id,
        project_id: project,
        created_by: caller.name().to_string(),
        created_at: stead_persistence::stored_now(),
    };
    state.store.insert_artifact(&artifact).await?;
    Ok((StatusCode::CREATED, Json(artifact.into())))
}

/// The `file` field of a `multipart/form-data` body, and the type its part declares.
async fn file_field(body: Bytes, boundary: String) -> Result<(Bytes, Option<String>), ApiError> {
    let invalid = |e: multer::Error| {
        ApiError::new(
            ErrorCode::InvalidBody,
            format!("the multipart body cannot be read: {e}"),
        )
    };
    let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    while let Some(field) = form.next_field().await.map_err(invalid)? {
        if field.name() == Some("file") {
            let declared = field.content_type().map(ToString::to_string);
            return Ok((field.bytes().await.map_err(invalid)?, declared));
        }
    }
    Err(ApiError::new(
        ErrorCode::InvalidRequest,
        "a multipart upload carries the artifact in a field named `file`",
    ))
}

/// The artifact `id` when the caller may read it: its session's (a token of that session, or
/// an operator of its project), or its project's (an operator of that project).
pub(crate) async fn readable(
    state: &AppState,
    caller: &crate::auth::Principal,
    id: Uuid,
) -> Result<Artifact, ApiError> {
    let artifact = match state.store.get_artifact(id).await {
        Ok(artifact) => artifact,
        Err(stead_persistence::Error::NotFound(_)) => return Err(not_found(id)),
        Err(error) => return Err(error.into()),
    };
    match artifact.session_id {
        Some(session) => {
            caller
                .require_session(state.store.as_ref(), session)
                .await?
        }
        None => {
            caller.require_operator()?;
            // Another project's artifact does not exist for this caller.
            if caller
                .confined_to()
                .is_some_and(|p| p != artifact.project_id)
            {
                return Err(not_found(id));
            }
        }
    }
    Ok(artifact)
}

/// The bytes of an artifact the caller may read ([`readable`]).
pub(crate) async fn read_bytes(
    state: &AppState,
    caller: &crate::auth::Principal,
    id: Uuid,
) -> Result<(Artifact, Bytes), ApiError> {
    let artifacts = store(state)?;
    let artifact = readable(state, caller, id).await?;
    let bytes = artifacts
        .blobs
        .get(&artifact.sha256, None)
        .await
        .map_err(store_failed)?;
    Ok((artifact, bytes))
}

/// A single `bytes=` range of a blob of `size` bytes: `None` for none asked (or several,
/// which are answered whole), `Err` for one outside the blob.
fn range(headers: &HeaderMap, size: u64) -> Result<Option<std::ops::Range<u64>>, ()> {
    let Some(spec) = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("bytes="))
    else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let (start, end) = spec.split_once('-').ok_or(())?;
    let number = |s: &str| s.trim().parse::<u64>().map_err(|_| ());
    let range = match (start.trim().is_empty(), end.trim().is_empty()) {
        // `bytes=-n`: the last n bytes.
        (true, false) => {
            let n = number(end)?.min(size);
            if n == 0 {
                return Err(());
            }
            size - n..size
        }
        (false, true) => number(start)?..size,
        (false, false) => number(start)?..number(end)?.saturating_add(1).min(size),
        (true, true) => return Err(()),
    };
    if range.start >= size || range.start >= range.end {
        return Err(());
    }
    Ok(Some(range))
}

/// The artifact's bytes (or one range of them: 206).
#[utoipa::path(get, path = "/v1/artifacts/{id}", params(("id" = Uuid, Path, description = "Artifact id"), ("Range" = Option<String>, Header, description = "One `bytes=start-end` range")), responses((status = 200, description = "The bytes, typed as read from them", content_type = "*/*"), (status = 206, description = "The range asked", content_type = "*/*"), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 416, body = ErrorBody), (status = 503, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn download(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let artifacts = store(&state)?;
    let artifact = readable(&state, &caller, id).await?;
    let size = artifact.size as u64;
    let Ok(range) = range(&headers, size) else {
        let mut refused = ApiError::new(
            ErrorCode::RangeNotSatisfiable,
            format!("the artifact has {size} bytes; ask one range within them"),
        )
        .into_response();
        if let Ok(all) = HeaderValue::from_str(&format!("bytes */{size}")) {
            refused.headers_mut().insert(header::CONTENT_RANGE, all);
        }
        return Ok(refused);
    };
    let bytes = artifacts
        .blobs
        .get(&artifact.sha256, range.clone())
        .await
        .map_err(store_failed)?;
    let mut response = bytes.into_response();
    let set = response.headers_mut();
    let value = |s: &str| HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static(""));
    set.insert(header::CONTENT_TYPE, value(&artifact.content_type));
    set.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    set.insert(header::ETAG, value(&format!("\"{}\"", artifact.sha256)));
    set.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=31536000, immutable"),
    );
    set.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    set.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    if let Some(range) = range {
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
        response.headers_mut().insert(
            header::CONTENT_RANGE,
            value(&format!("bytes {}-{}/{size}", range.start, range.end - 1)),
        );
    }
    Ok(response)
}

/// A session's artifacts, oldest first.
#[utoipa::path(get, path = "/v1/sessions/{id}/artifacts", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = ArtifactList), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn session_artifacts(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<ArtifactList>, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    state.store.get_session(id).await?;
    let rows = state.store.session_artifacts(id).await?;
    Ok(Json(ArtifactList {
        artifacts: rows.into_iter().map(ArtifactView::from).collect(),
    }))
}

/// Deletes the blobs a purge left without a row (after it committed). A failure is logged:
/// the rows are gone, and a blob left behind is only unused bytes.
pub async fn delete_orphans(state: &AppState, sha256s: &[String]) {
    let Some(artifacts) = &state.artifacts else {
        return;
    };
    for sha256 in sha256s {
        if let Err(error) = artifacts.blobs.delete(sha256).await {
            tracing::warn!(%sha256, %error, "a purged artifact's blob could not be deleted");
        }
    }
}

/// The most attachments one message may carry.
pub const MAX_ATTACHMENTS: usize = 8;

/// A message's attachments, checked: each an artifact of `session` (or of its project, uploaded
/// without a session), at most [`MAX_ATTACHMENTS`]; images only where the session's route has
/// a model that sees them (else 422 `images_unsupported`, and nothing is journaled).
pub(crate) async fn attachments(
    state: &AppState,
    session: Uuid,
    refs: &[AttachmentRef],
) -> Result<Vec<Attachment>, ApiError> {
    if refs.is_empty() {
        return Ok(Vec::new());
    }
    if refs.len() > MAX_ATTACHMENTS {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("a message may carry {MAX_ATTACHMENTS} attachments"),
        ));
    }
    if state.artifacts.is_none() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "this server keeps no artifacts: a message cannot carry attachments",
        ));
    }
    let project = state.store.get_session(session).await?.project_id;
    let mut out = Vec::with_capacity(refs.len());
    for (i, reference) in refs.iter().enumerate() {
        let id = reference.artifact_id;
        let missing = || {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!("attachments[{i}]: no artifact {id} in this session"),
            )
        };
        let artifact = match state.store.get_artifact(id).await {
            Ok(artifact) => artifact,
            Err(stead_persistence::Error::NotFound(_)) => return Err(missing()),
            Err(other) => return Err(other.into()),
        };
        let ours = match artifact.session_id {
            Some(owner) => owner == session,
            None => artifact.project_id == project,
        };
        if !ours {
            return Err(missing());
        }
        out.push(Attachment {
            artifact_id: artifact.id,
            content_type: artifact.content_type,
            size: artifact.size,
            sha256: artifact.sha256,
        });
    }
    if out.iter().any(Attachment::is_image) {
        let folded = state.sessions.state(session).await?;
        let agent_route = state
            .sessions
            .agent(&folded.agent)
            .map(|a| a.rules.route.clone())
            .unwrap_or_default();
        let route = folded.route(&agent_route).to_string();
        if state.model_router.route_sees_images(&route) == Some(false) {
            return Err(ApiError::new(
                ErrorCode::ImagesUnsupported,
                format!(
                    "this session's route `{route}` has no model that sees images; attach \
                     other files, or fork the session onto a route whose models do \
                     (docs/multimodal.md)"
                ),
            ));
        }
    }
    Ok(out)
}

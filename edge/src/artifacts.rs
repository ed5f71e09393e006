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
use stead_artifacts::{ArtifactError, BlobStore};
use stead_persistence::Artifact;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::Caller;
use crate::views::ErrorBody;
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
#[utoipa::path(post, path = "/v1/artifacts", params(UploadQuery), request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The bytes; `Content-Type` is a hint only (the type is read from them)"), responses((status = 201, body = ArtifactView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody), (status = 503, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
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
    if body.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "an artifact needs at least one byte",
        ));
    }
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let content_type = stead_artifacts::content_type(declared, &body);
    let stored = artifacts.blobs.put(body).await.map_err(store_failed)?;
    let artifact = Artifact {
        id: Uuid::now_v7(),
        sha256: stored.sha256,
        size: stored.size as i64,
        content_type,
        session_id: query.session_id,
        project_id: project,
        created_by: caller.name().to_string(),
        // Microseconds: what both backends store.
        created_at: DateTime::from_timestamp_micros(Utc::now().timestamp_micros())
            .unwrap_or_else(Utc::now),
    };
    state.store.insert_artifact(&artifact).await?;
    Ok((StatusCode::CREATED, Json(artifact.into())))
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

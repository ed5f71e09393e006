//! Knowledge collections over REST (docs/knowledge.md): collections, their documents and
//! queries. A collection is its project's: the caller's project (the default one for the
//! installation's keys) decides which collection a name means (docs/tenancy.md). The work is the binary's knowledge service (chunking,
//! embedding through the router, the store, the search index), reached through
//! [`KnowledgeApi`]; this module is the HTTP shape of it.

use async_trait::async_trait;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use stead_persistence::CollectionKey;

use crate::auth::Caller;
use crate::views::{
    CollectionList, CollectionView, DocumentList, DocumentText, ErrorBody, QueryAnswer,
    StoredDocument,
};
use crate::{ApiError, ApiJson, ApiPath, ApiQuery, AppState, ErrorCode};

/// What the HTTP edge asks of the knowledge service. Errors are answered as they are.
#[async_trait]
pub trait KnowledgeApi: Send + Sync {
    /// `(collection, created)`.
    async fn create_collection(
        &self,
        key: &CollectionKey,
        embedding_route: Option<&str>,
    ) -> Result<(CollectionView, bool), ApiError>;
    async fn list_collections(&self, project: uuid::Uuid) -> Result<CollectionList, ApiError>;
    async fn get_collection(&self, key: &CollectionKey) -> Result<CollectionView, ApiError>;
    async fn delete_collection(&self, key: &CollectionKey) -> Result<(), ApiError>;
    /// `(document, created)`; `api_key` is whom the embeddings are charged to.
    async fn put_document(
        &self,
        collection: &CollectionKey,
        id: &str,
        text: &str,
        metadata: Option<Value>,
        api_key: Option<String>,
    ) -> Result<(StoredDocument, bool), ApiError>;
    async fn list_documents(
        &self,
        collection: &CollectionKey,
        after: Option<&str>,
        limit: u32,
    ) -> Result<DocumentList, ApiError>;
    async fn get_document(
        &self,
        collection: &CollectionKey,
        id: &str,
    ) -> Result<DocumentText, ApiError>;
    async fn delete_document(&self, collection: &CollectionKey, id: &str) -> Result<(), ApiError>;
    async fn query(
        &self,
        collection: &CollectionKey,
        body: Value,
        api_key: Option<String>,
    ) -> Result<QueryAnswer, ApiError>;
}

fn service(state: &AppState) -> Result<&dyn KnowledgeApi, ApiError> {
    state
        .knowledge
        .as_deref()
        .ok_or_else(|| ApiError::not_found("knowledge collections are not served here"))
}

/// The collection `name` means to `caller`: its project's.
fn key(caller: &crate::auth::Principal, name: String) -> CollectionKey {
    CollectionKey::new(caller.project(), name)
}

fn created(created: bool, body: impl serde::Serialize) -> Response {
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (status, Json(body)).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewCollection {
    name: String,
    #[serde(default)]
    embedding_route: Option<String>,
}

#[utoipa::path(post, path = "/v1/collections", request_body(content = Object, description = "`{\"name\", \"embedding_route\"?}` (docs/knowledge.md)"), responses((status = 201, description = "The collection", body = CollectionView), (status = 200, description = "It exists already with this embedding route", body = CollectionView), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 502, body = ErrorBody), (status = 503, description = "Knowledge is not served, or the embedding route has no available target", body = ErrorBody)))]
pub async fn create_collection(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(body): ApiJson<NewCollection>,
) -> Result<Response, ApiError> {
    caller.require_operator()?;
    let (collection, new) = service(&state)?
        .create_collection(&key(&caller, body.name), body.embedding_route.as_deref())
        .await?;
    Ok(created(new, collection))
}

#[utoipa::path(get, path = "/v1/collections", responses((status = 200, body = CollectionList), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 502, body = ErrorBody), (status = 503, description = "Knowledge is not served, or the embedding route has no available target", body = ErrorBody)))]
pub async fn list_collections(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<CollectionList>, ApiError> {
    caller.require_operator()?;
    Ok(Json(
        service(&state)?.list_collections(caller.project()).await?,
    ))
}

#[utoipa::path(get, path = "/v1/collections/{name}", params(("name" = String, Path, description = "Collection name")), responses((status = 200, description = "The collection", body = CollectionView), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 502, body = ErrorBody), (status = 503, description = "Knowledge is not served, or the embedding route has no available target", body = ErrorBody)))]
pub async fn get_collection(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<CollectionView>, ApiError> {
    caller.require_operator()?;
    Ok(Json(
        service(&state)?.get_collection(&key(&caller, name)).await?,
    ))
}

#[utoipa::path(delete, path = "/v1/collections/{name}", params(("name" = String, Path, description = "Collection name")), responses((status = 204, description = "Deleted with its documents"), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 502, body = ErrorBody), (status = 503, description = "Knowledge is not served, or the embedding route has no available target", body = ErrorBody)))]
pub async fn delete_collection(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_operator()?;
    service(&state)?
        .delete_collection(&key(&caller, name))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentBody {
    text: String,
    #[serde(default)]
    metadata: Option<Value>,
}

#[utoipa::path(put, path = "/v1/collections/{name}/documents/{id}", params(("name" = String, Path, description = "Collection name"), ("id" = String, Path, description = "Document id (one path segment, percent-encoded)")), request_body(content = Object, description = "`{\"text\", \"metadata\"?}`: chunked, embedded and stored atomically"), responses((status = 201, description = "Created", body = StoredDocument), (status = 200, description = "Replaced, or unchanged", body = StoredDocument), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 502, body = ErrorBody), (status = 503, description = "Knowledge is not served, or the embedding route has no available target", body = ErrorBody)))]
pub async fn put_document(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((collection, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<DocumentBody>,
) -> Result<Response, ApiError> {
    caller.require_operator()?;
    let (document, new) = service(&state)?
        .put_document(
            &key(&caller, collection),
            &id,
            &body.text,
            body.metadata,
            caller.limits_key(),
        )
        .await?;
    Ok(created(new, document))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentPage {
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/collections/{name}/documents", params(("name" = String, Path, description = "Collection name"), ("after" = Option<String>, Query, description = "The last id of the previous page"), ("limit" = Option<u32>, Query, description = "1 to 500, default 100")), responses((status = 200, body = DocumentList), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 502, body = ErrorBody), (status = 503, description = "Knowledge is not served, or the embedding route has no available target", body = ErrorBody)))]
pub async fn list_documents(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(collection): ApiPath<String>,
    ApiQuery(page): ApiQuery<DocumentPage>,
) -> Result<Json<DocumentList>, ApiError> {
    caller.require_operator()?;
    let limit = page.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::new(
            ErrorCode::InvalidQuery,
            "limit must be from 1 to 500",
        ));
    }
    Ok(Json(
        service(&state)?
            .list_documents(&key(&caller, collection), page.after.as_deref(), limit)
            .await?,
    ))
}

#[utoipa::path(get, path = "/v1/collections/{name}/documents/{id}", params(("name" = String, Path, description = "Collection name"), ("id" = String, Path, description = "Document id (one path segment, percent-encoded)")), responses((status = 200, description = "The document with its text and chunks", body = DocumentText), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 502, body = ErrorBody), (status = 503, description = "Knowledge is not served, or the embedding route has no available target", body = ErrorBody)))]
pub async fn get_document(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((collection, id)): ApiPath<(String, String)>,
) -> Result<Json<DocumentText>, ApiError> {
    caller.require_operator()?;
    Ok(Json(
        service(&state)?
            .get_document(&key(&caller, collection), &id)
            .await?,
    ))
}

#[utoipa::path(delete, path = "/v1/collections/{name}/documents/{id}", params(("name" = String, Path, description = "Collection name"), ("id" = String, Path, description = "Document id (one path segment, percent-encoded)")), responses((status = 204, description = "Deleted"), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 502, body = ErrorBody), (status = 503, description = "Knowledge is not served, or the embedding route has no available target", body = ErrorBody)))]
pub async fn delete_document(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((collection, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    caller.require_operator()?;
    service(&state)?
        .delete_document(&key(&caller, collection), &id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/collections/{name}/query", params(("name" = String, Path, description = "Collection name")), request_body(content = Object, description = "`{\"query\", \"top_k\"?, \"mode\"?, \"filter\"?}` (docs/knowledge.md)"), responses((status = 200, body = QueryAnswer), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody), (status = 502, body = ErrorBody), (status = 503, description = "Knowledge is not served, or the embedding route has no available target", body = ErrorBody)))]
pub async fn query(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(collection): ApiPath<String>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Json<QueryAnswer>, ApiError> {
    caller.require_operator()?;
    if !body.is_object() {
        return Err(ApiError::new(
            ErrorCode::InvalidSearch,
            "the body must be a JSON object",
        ));
    }
    Ok(Json(
        service(&state)?
            .query(&key(&caller, collection), body, caller.limits_key())
            .await?,
    ))
}

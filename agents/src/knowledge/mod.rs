//! Knowledge collections (docs/knowledge.md): the service behind
//! `/v1/collections…`, the `knowledge` agent tool and `stead knowledge` (the binary's `knowledge_cli`). A document is cut into
//! chunks ([`chunk`]), embedded through the model router (the collection's embedding route:
//! logged, cached and limited like any call) and written to the store in one transaction.
//! Queries embed their text the same way and search the collection's in-memory [`index`],
//! which is built from the store and built again when the collection's version moves (another
//! node's write included).

mod api;
pub mod chunk;
pub mod files;
pub mod index;
pub mod query;
pub mod tool;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{json, Value};
use sha2::Digest;
use stead_config::KnowledgeConfig;
use stead_http::{ApiError, ErrorCode};
use stead_persistence::{
    CollectionKey, CollectionRow, NewChunk, PutDocument, PutOutcome, Reembedding,
};
use stead_router::{CallOptions, EmbedRequest, Router};

use index::{Index, Ranked};
pub use query::Query;
pub use stead_config::SearchMode;

/// Texts per embedding call.
const EMBED_BATCH: usize = 64;
/// Most metadata fields of a document.
const MAX_METADATA_FIELDS: usize = 32;

/// One result of a query.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub document_id: String,
    pub chunk_index: i64,
    pub chunk: String,
    pub score: f32,
    pub metadata: Value,
}

/// The knowledge service; one per process, shared.
pub struct Knowledge {
    store: Arc<dyn stead_persistence::Knowledge>,
    router: Arc<Router>,
    config: KnowledgeConfig,
    indexes: Mutex<HashMap<CollectionKey, Arc<Index>>>,
    /// Held while an index is (re)built, so that concurrent queries build it once.
    building: tokio::sync::Mutex<()>,
}

fn invalid(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::new(code, message)
}

/// A store error as the API answers it.
pub fn store_error(error: stead_persistence::Error) -> ApiError {
    use stead_persistence::Error;
    match error {
        Error::NotFound(what) if what.starts_with("collection") => {
            invalid(ErrorCode::CollectionNotFound, format!("{what} not found"))
        }
        Error::NotFound(what) => invalid(ErrorCode::DocumentNotFound, format!("{what} not found")),
        Error::Exists(message) => invalid(ErrorCode::CollectionExists, message),
        Error::Mismatch(message) | Error::Stale(message) => {
            invalid(ErrorCode::EmbeddingMismatch, message)
        }
        other => ApiError::internal("the knowledge store failed", other),
    }
}

/// Collection names: 1–64 letters, digits, `-`, `_`, `.`.
fn check_name(name: &str) -> Result<(), ApiError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            ErrorCode::InvalidCollection,
            format!("`{name}` is not a collection name (1 to 64 letters, digits, `-`, `_`, `.`)"),
        ))
    }
}

/// Document ids: 1–256 characters, none of them control characters.
fn check_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.chars().count() > 256 || id.chars().any(char::is_control) {
        return Err(invalid(
            ErrorCode::InvalidDocument,
            "a document id has 1 to 256 characters and no control characters",
        ));
    }
    Ok(())
}

/// Metadata: an object of up to 32 string, number or bool values.
fn check_metadata(metadata: Option<Value>) -> Result<Value, ApiError> {
    let metadata = metadata.unwrap_or_else(|| json!({}));
    let ok = match &metadata {
        Value::Object(map) => {
            map.len() <= MAX_METADATA_FIELDS
                && map.iter().all(|(k, v)| {
                    !k.is_empty()
                        && matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_))
                })
        }
        _ => false,
    };
    if !ok {
        return Err(invalid(
            ErrorCode::InvalidDocument,
            format!(
                "`metadata` must be an object of up to {MAX_METADATA_FIELDS} string, number or bool values"
            ),
        ));
    }
    Ok(metadata)
}

/// A vector scaled to unit length (a zero vector stays zero).
fn normalised(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|v| *v /= norm);
    }
    vector
}

impl Knowledge {
    pub fn new(
        store: Arc<dyn stead_persistence::Knowledge>,
        router: Arc<Router>,
        config: KnowledgeConfig,
    ) -> Self {
        Knowledge {
            store,
            router,
            config,
            indexes: Mutex::new(HashMap::new()),
            building: tokio::sync::Mutex::new(()),
        }
    }

    pub fn config(&self) -> &KnowledgeConfig {
        &self.config
    }

    pub fn store(&self) -> &Arc<dyn stead_persistence::Knowledge> {
        &self.store
    }

    pub async fn create_collection(
        &self,
        key: &CollectionKey,
        route: Option<&str>,
    ) -> Result<(CollectionRow, bool), ApiError> {
        check_name(&key.name)?;
        let route = route.unwrap_or(&self.config.embedding_route);
        if !self.router.route_names().iter().any(|r| r == route) {
            return Err(invalid(
                ErrorCode::InvalidCollection,
                format!("no route is named `{route}` (the embedding route)"),
            ));
        }
        self.store
            .create_collection(key, route)
            .await
            .map_err(store_error)
    }

    pub async fn collection(&self, key: &CollectionKey) -> Result<CollectionRow, ApiError> {
        self.store.get_collection(key).await.map_err(store_error)
    }

    /// Embeds `texts` through `route`, in calls of [`EMBED_BATCH`] charged as `charge` says
    /// (its key and session, as the request log records them); the vectors and the model
    /// that made them (every call must name the same one).
    pub async fn embed(
        &self,
        route: &str,
        texts: Vec<String>,
        charge: &CallOptions,
    ) -> Result<(Vec<Vec<f32>>, String), ApiError> {
        let mut vectors = Vec::with_capacity(texts.len());
        let mut model: Option<String> = None;
        for batch in texts.chunks(EMBED_BATCH) {
            let options = charge.clone();
            let request = EmbedRequest {
                route: route.to_string(),
                inputs: batch.to_vec(),
            };
            let answer = self
                .router
                .embed(request, options)
                .await
                .map_err(|e| ApiError::new(e.code.into(), e.message))?;
            match &model {
                Some(m) if *m != answer.model => {
                    return Err(invalid(
                        ErrorCode::EmbeddingMismatch,
                        format!(
                            "route `{route}` answered with two models (`{m}` and `{}`): a \
                             document's chunks must be embedded by one",
                            answer.model
                        ),
                    ))
                }
                _ => model = Some(answer.model.clone()),
            }
            vectors.extend(answer.vectors);
        }
        Ok((vectors, model.unwrap_or_default()))
    }

    /// Writes a document (chunked, embedded, stored atomically); unchanged text and metadata
    /// write nothing and embed nothing.
    pub async fn put_document(
        &self,
        collection: &CollectionKey,
        id: &str,
        text: &str,
        metadata: Option<Value>,
        api_key: Option<String>,
    ) -> Result<PutOutcome, ApiError> {
        check_id(id)?;
        let metadata = check_metadata(metadata)?;
        if text.len() > self.config.max_document_bytes {
            return Err(invalid(
                ErrorCode::DocumentTooLarge,
                format!(
                    "the document is {} bytes, over knowledge.max_document_bytes ({})",
                    text.len(),
                    self.config.max_document_bytes
                ),
            ));
        }
        let chunks = chunk::chunk(
            text,
            self.config.chunk_words,
            self.config.chunk_overlap_words,
        );
        if chunks.is_empty() {
            return Err(invalid(
                ErrorCode::InvalidDocument,
                "the document's text is empty",
            ));
        }
        let row = self.collection(collection).await?;
        let sha256 = format!("{:x}", sha2::Sha256::digest(text.as_bytes()));
        match self.store.get_document(collection, id).await {
            Ok((existing, _, _)) if existing.sha256 == sha256 && existing.metadata == metadata => {
                return Ok(PutOutcome::Unchanged(existing));
            }
            Ok(_) | Err(stead_persistence::Error::NotFound(_)) => {}
            Err(error) => return Err(store_error(error)),
        }
        let (vectors, model) = self
            .embed(
                &row.embedding_route,
                chunks.clone(),
                &CallOptions {
                    api_key,
                    ..Default::default()
                },
            )
            .await?;
        let put = PutDocument {
            collection: collection.clone(),
            id: id.to_string(),
            text: text.to_string(),
            metadata,
            sha256,
            model,
            chunks: chunks
                .into_iter()
                .zip(vectors)
                .map(|(text, embedding)| NewChunk { text, embedding })
                .collect(),
        };
        self.store.put_document(put).await.map_err(store_error)
    }

    /// The collection's index at its stored version (built again when that moved).
    pub async fn index(&self, collection: &CollectionKey) -> Result<Arc<Index>, ApiError> {
        let row = self.collection(collection).await?;
        if let Some(index) = self.cached(collection, row.version) {
            return Ok(index);
        }
        let _building = self.building.lock().await;
        let row = self.collection(collection).await?;
        if let Some(index) = self.cached(collection, row.version) {
            return Ok(index);
        }
        let loaded = self
            .store
            .collection_chunks(collection)
            .await
            .map_err(store_error)?;
        let index = tokio::task::spawn_blocking(move || Index::build(loaded))
            .await
            .map_err(|e| ApiError::internal("building a knowledge index failed", e))?;
        let index = Arc::new(index);
        self.indexes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(collection.clone(), index.clone());
        Ok(index)
    }

    fn cached(&self, collection: &CollectionKey, version: i64) -> Option<Arc<Index>> {
        let indexes = self.indexes.lock().unwrap_or_else(PoisonError::into_inner);
        indexes
            .get(collection)
            .filter(|index| index.version == version)
            .cloned()
    }

    /// Reads a query body: `text` or `vector`, `top_k`, `filter`, `mode`.
    pub fn parse_query(&self, body: &Value) -> Result<Query, ApiError> {
        query::parse(body, self.config.max_top_k)
    }

    /// Runs a query against a collection; a text query's embedding is charged as `charge`
    /// says.
    pub async fn query(
        &self,
        collection: &CollectionKey,
        query: Query,
        charge: &CallOptions,
    ) -> Result<Vec<Hit>, ApiError> {
        let index = self.index(collection).await?;
        if let Some(field) = query.filter.keys().find(|f| !index.fields.contains(*f)) {
            return Err(invalid(
                ErrorCode::UnknownFilterField,
                format!(
                    "no document of collection `{}` has the metadata field `{field}`",
                    collection.name
                ),
            ));
        }
        if index.chunks.is_empty() {
            return Ok(Vec::new());
        }
        let vector = match (&query.vector, &query.text) {
            (Some(vector), _) => {
                if vector.len() != index.dimension {
                    return Err(invalid(
                        ErrorCode::WrongDimension,
                        format!(
                            "the vector has {} dimensions; collection `{}` holds {}",
                            vector.len(),
                            collection.name,
                            index.dimension
                        ),
                    ));
                }
                normalised(vector.clone())
            }
            (None, Some(text)) => {
                let row = self.collection(collection).await?;
                let (mut vectors, model) = self
                    .embed(&row.embedding_route, vec![text.clone()], charge)
                    .await?;
                if index.model.as_deref().is_some_and(|m| m != model) {
                    return Err(invalid(
                        ErrorCode::EmbeddingMismatch,
                        format!(
                            "route `{}` embedded the query with `{model}`; the collection holds \
                             embeddings of `{}`",
                            row.embedding_route,
                            index.model.as_deref().unwrap_or_default()
                        ),
                    ));
                }
                let vector = vectors.pop().unwrap_or_default();
                if vector.len() != index.dimension {
                    return Err(invalid(
                        ErrorCode::WrongDimension,
                        format!(
                            "route `{}` embedded the query in {} dimensions; collection `{}` \
                             holds {}",
                            row.embedding_route,
                            vector.len(),
                            collection.name,
                            index.dimension
                        ),
                    ));
                }
                vector
            }
            (None, None) => Vec::new(),
        };
        let index_for_search = index.clone();
        let ranked: Ranked = tokio::task::spawn_blocking(move || {
            let Query {
                text,
                top_k,
                filter,
                mode,
                ..
            } = query;
            match mode {
                SearchMode::Exact => index_for_search.exact(&vector, top_k, &filter),
                SearchMode::Ann => index_for_search.ann(&vector, top_k, &filter),
                SearchMode::Hybrid => {
                    index_for_search.hybrid(&vector, text.as_deref().unwrap_or(""), top_k, &filter)
                }
            }
        })
        .await
        .map_err(|e| ApiError::internal("a knowledge search failed", e))?;
        Ok(ranked
            .into_iter()
            .map(|(position, score)| {
                let chunk = &index.chunks[position];
                Hit {
                    document_id: chunk.document_id.clone(),
                    chunk_index: chunk.chunk_index,
                    chunk: chunk.text.clone(),
                    score,
                    metadata: chunk.metadata.clone(),
                }
            })
            .collect())
    }

    /// Embeds every chunk of the collection again through `route` (its own route when
    /// `None`) and replaces the embeddings and the model in one transaction; `progress` hears
    /// (chunks embedded, chunks in all). A collection written meanwhile is left alone
    /// (`embedding_mismatch`: run it again).
    pub async fn reembed(
        &self,
        collection: &CollectionKey,
        route: Option<&str>,
        progress: &(dyn Fn(usize, usize) + Send + Sync),
    ) -> Result<CollectionRow, ApiError> {
        let loaded = self
            .store
            .collection_chunks(collection)
            .await
            .map_err(store_error)?;
        let route = route
            .map(String::from)
            .unwrap_or_else(|| loaded.collection.embedding_route.clone());
        if !self.router.route_names().contains(&route) {
            return Err(invalid(
                ErrorCode::InvalidCollection,
                format!("no route is named `{route}`"),
            ));
        }
        let total = loaded.chunks.len();
        let mut embeddings = Vec::with_capacity(total);
        let mut model = String::new();
        progress(0, total);
        for batch in loaded.chunks.chunks(EMBED_BATCH * 4) {
            let texts = batch.iter().map(|c| c.text.clone()).collect();
            let (vectors, made_by) = self.embed(&route, texts, &Default::default()).await?;
            if !model.is_empty() && model != made_by {
                return Err(invalid(
                    ErrorCode::EmbeddingMismatch,
                    format!("route `{route}` answered with two models (`{model}` and `{made_by}`)"),
                ));
            }
            model = made_by;
            for (chunk, vector) in batch.iter().zip(vectors) {
                embeddings.push((chunk.document_id.clone(), chunk.chunk_index, vector));
            }
            progress(embeddings.len(), total);
        }
        self.store
            .reembed_collection(Reembedding {
                collection: collection.clone(),
                from_version: loaded.collection.version,
                embedding_route: route,
                model,
                embeddings,
            })
            .await
            .map_err(store_error)?;
        self.collection(collection).await
    }
}

//! Knowledge collections in the store (docs/knowledge.md): a collection's row, its documents
//! and their chunks with one embedding each. Writes of a document are atomic: its old chunks
//! and its new ones are never both visible, and a half-written document never is. Every
//! change moves the collection's `version`, so a node's in-memory search index knows when to
//! load the chunks again.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

/// What names a collection: its project and its name, unique within the project
/// (docs/tenancy.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CollectionKey {
    pub project: Uuid,
    pub name: String,
}

impl CollectionKey {
    pub fn new(project: Uuid, name: impl Into<String>) -> Self {
        CollectionKey {
            project,
            name: name.into(),
        }
    }
}

/// A collection as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectionRow {
    pub project_id: Uuid,
    pub name: String,
    /// The route its texts and queries are embedded through.
    pub embedding_route: String,
    /// The model that made its embeddings and their dimension (`None` while it has none).
    pub model: Option<String>,
    pub dimension: Option<i64>,
    pub documents: i64,
    pub chunks: i64,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A document as stored (its text only when read one by one).
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentRow {
    pub id: String,
    pub metadata: Value,
    pub sha256: String,
    pub chunks: i64,
    pub bytes: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One chunk to write: its text and its embedding.
#[derive(Debug, Clone, PartialEq)]
pub struct NewChunk {
    pub text: String,
    pub embedding: Vec<f32>,
}

/// A document to write in place of any document of the same id.
#[derive(Debug, Clone, PartialEq)]
pub struct PutDocument {
    pub collection: CollectionKey,
    pub id: String,
    pub text: String,
    pub metadata: Value,
    pub sha256: String,
    /// The model that made the chunks' embeddings; must be the collection's unless it has
    /// none yet.
    pub model: String,
    pub chunks: Vec<NewChunk>,
}

/// What a put did.
#[derive(Debug, Clone, PartialEq)]
pub enum PutOutcome {
    Created(DocumentRow),
    Replaced(DocumentRow),
    /// The stored document already had this text and metadata: nothing was written.
    Unchanged(DocumentRow),
}

impl PutOutcome {
    pub fn document(&self) -> &DocumentRow {
        match self {
            PutOutcome::Created(d) | PutOutcome::Replaced(d) | PutOutcome::Unchanged(d) => d,
        }
    }
}

/// A stored chunk with what a search index needs of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkRow {
    pub document_id: String,
    pub chunk_index: i64,
    pub text: String,
    pub embedding: Vec<f32>,
    /// The document's metadata.
    pub metadata: Value,
}

/// Every chunk of a collection as of one version.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectionChunks {
    pub collection: CollectionRow,
    pub chunks: Vec<ChunkRow>,
}

/// New embeddings for every chunk of a collection (a re-embed with another model).
#[derive(Debug, Clone, PartialEq)]
pub struct Reembedding {
    pub collection: CollectionKey,
    /// The version the embeddings were computed from; a collection changed since is left
    /// alone ([`crate::Error::Stale`]).
    pub from_version: i64,
    /// The route the new embeddings came through (the collection's from now on).
    pub embedding_route: String,
    pub model: String,
    /// `(document_id, chunk_index, embedding)` for every chunk.
    pub embeddings: Vec<(String, i64, Vec<f32>)>,
}

/// Little-endian float32 bytes of an embedding, as the chunk rows store it.
pub fn encode_embedding(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The embedding a chunk row stores.
pub fn decode_embedding(bytes: &[u8]) -> crate::Result<Vec<f32>> {
    if bytes.len() % 4 != 0 {
        return Err(crate::Error::Corrupt(format!(
            "an embedding of {} bytes (not a multiple of 4)",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

//! Knowledge collections, documents and chunks on both backends (`crate::knowledge`).

use async_trait::async_trait;

use super::dialect::{Columns, Dialect, On, Sql};
use super::SqlStore;
use crate::knowledge::{decode_embedding, encode_embedding};
use crate::types::now_micros;
use crate::{
    ChunkRow, CollectionChunks, CollectionKey, CollectionRow, DocumentRow, Error, Knowledge,
    PutDocument, PutOutcome, Reembedding, Result,
};

const COLLECTION_COLUMNS: &str =
    "project_id, name, embedding_route, model, dimension, documents, chunks, version, created_at, updated_at";
const DOCUMENT_COLUMNS: &str = "id, metadata, sha256, chunks, bytes, created_at, updated_at";
/// Chunk rows per `INSERT` (5 values each, far under either backend's bound on parameters).
const CHUNKS_PER_INSERT: usize = 400;

fn collection(row: &impl Columns) -> Result<CollectionRow> {
    Ok(CollectionRow {
        project_id: row.id("project_id")?,
        name: row.text("name")?,
        embedding_route: row.text("embedding_route")?,
        model: row.opt_text("model")?,
        dimension: row.opt_int("dimension")?,
        documents: row.int("documents")?,
        chunks: row.int("chunks")?,
        version: row.int("version")?,
        created_at: row.time("created_at")?,
        updated_at: row.time("updated_at")?,
    })
}

fn document(row: &impl Columns) -> Result<DocumentRow> {
    Ok(DocumentRow {
        id: row.text("id")?,
        metadata: row.json("metadata")?,
        sha256: row.text("sha256")?,
        chunks: row.int("chunks")?,
        bytes: row.int("bytes")?,
        created_at: row.time("created_at")?,
        updated_at: row.time("updated_at")?,
    })
}

fn collection_missing(key: &CollectionKey) -> Error {
    Error::NotFound(format!("collection `{}`", key.name))
}

impl<D: Dialect> SqlStore<D> {
    async fn collection_row(
        &self,
        key: &CollectionKey,
        on: On<'_, D::Db>,
    ) -> Result<CollectionRow> {
        let row = Sql::<D>::new(format!(
            "SELECT {COLLECTION_COLUMNS} FROM knowledge_collections WHERE "
        ))
        .named("name", key.project, &key.name)
        .fetch_optional(on)
        .await?;
        match row {
            Some(row) => collection(&row),
            None => Err(collection_missing(key)),
        }
    }

    async fn document_row(
        &self,
        collection: &CollectionKey,
        id: &str,
        on: On<'_, D::Db>,
    ) -> Result<Option<DocumentRow>> {
        let row = Sql::<D>::new(format!(
            "SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents WHERE "
        ))
        .named("collection", collection.project, &collection.name)
        .push(" AND id = ")
        .bind(id)
        .fetch_optional(on)
        .await?;
        row.as_ref().map(document).transpose()
    }
}

#[async_trait]
impl<D: Dialect> Knowledge for SqlStore<D> {
    async fn create_collection(
        &self,
        key: &CollectionKey,
        embedding_route: &str,
    ) -> Result<(CollectionRow, bool)> {
        let now = now_micros();
        let inserted = Sql::<D>::new(
            "INSERT INTO knowledge_collections \
             (project_id, name, embedding_route, created_at, updated_at) VALUES (",
        )
        .bind(key.project)
        .push(", ")
        .bind(key.name.as_str())
        .push(", ")
        .bind(embedding_route)
        .push(", ")
        .bind(now)
        .push(", ")
        .bind(now)
        .push(") ON CONFLICT (project_id, name) DO NOTHING")
        .execute(self.on_write())
        .await?;
        let row = self.collection_row(key, self.on_write()).await?;
        if inserted == 0 && row.embedding_route != embedding_route {
            return Err(Error::Exists(format!(
                "collection `{}` exists with embedding route `{}`",
                key.name, row.embedding_route
            )));
        }
        Ok((row, inserted > 0))
    }

    async fn get_collection(&self, key: &CollectionKey) -> Result<CollectionRow> {
        self.collection_row(key, self.on_read()).await
    }

    async fn list_collections(&self, project: uuid::Uuid) -> Result<Vec<CollectionRow>> {
        let rows = Sql::<D>::new(format!(
            "SELECT {COLLECTION_COLUMNS} FROM knowledge_collections WHERE project_id = "
        ))
        .bind(project)
        .push(" ORDER BY name")
        .fetch_all(self.on_read())
        .await?;
        rows.iter().map(collection).collect()
    }

    async fn delete_collection(&self, key: &CollectionKey) -> Result<bool> {
        let mut tx = self.db.writer().begin().await?;
        // Chunks first: their foreign key names the document, not the collection.
        Sql::<D>::new("DELETE FROM knowledge_chunks WHERE ")
            .named("collection", key.project, &key.name)
            .execute(On::Tx(&mut tx))
            .await?;
        Sql::<D>::new("DELETE FROM knowledge_documents WHERE ")
            .named("collection", key.project, &key.name)
            .execute(On::Tx(&mut tx))
            .await?;
        let deleted = Sql::<D>::new("DELETE FROM knowledge_collections WHERE ")
            .named("name", key.project, &key.name)
            .execute(On::Tx(&mut tx))
            .await?;
        tx.commit().await?;
        Ok(deleted > 0)
    }

    async fn put_document(&self, put: PutDocument) -> Result<PutOutcome> {
        let mut tx = self.db.writer().begin().await?;
        // Moving the version first takes the collection's row lock (PostgreSQL) for the
        // whole write: two puts of one collection are serialised.
        let now = now_micros();
        let touched = Sql::<D>::new("UPDATE knowledge_collections SET version = version + 1 ")
            .push("WHERE ")
            .named("name", put.collection.project, &put.collection.name)
            .execute(On::Tx(&mut tx))
            .await?;
        if touched == 0 {
            return Err(collection_missing(&put.collection));
        }
        let row = self
            .collection_row(&put.collection, On::Tx(&mut tx))
            .await?;
        let dimension = put.chunks.first().map_or(0, |c| c.embedding.len()) as i64;
        if put
            .chunks
            .iter()
            .any(|c| c.embedding.len() as i64 != dimension)
        {
            return Err(Error::InvalidInput(
                "the chunks' embeddings differ in dimension".into(),
            ));
        }
        if let (Some(model), Some(stored)) = (&row.model, row.dimension) {
            if row.chunks > 0 && (*model != put.model || stored != dimension) {
                return Err(Error::Mismatch(format!(
                    "collection `{}` holds embeddings of `{model}` ({stored} dimensions), \
                     not of `{}` ({dimension}): re-embed it first",
                    put.collection.name, put.model
                )));
            }
        }
        let existing = self
            .document_row(&put.collection, &put.id, On::Tx(&mut tx))
            .await?;
        if let Some(existing) = &existing {
            if existing.sha256 == put.sha256 && existing.metadata == put.metadata {
                // Unchanged: the version moved back (the transaction is dropped).
                return Ok(PutOutcome::Unchanged(existing.clone()));
            }
        }
        let old_chunks = existing.as_ref().map_or(0, |d| d.chunks);
        Sql::<D>::new("DELETE FROM knowledge_chunks WHERE ")
            .named("collection", put.collection.project, &put.collection.name)
            .push(" AND document_id = ")
            .bind(put.id.as_str())
            .execute(On::Tx(&mut tx))
            .await?;
        let created_at = existing.as_ref().map_or(now, |d| d.created_at);
        let mut upsert = Sql::<D>::new(
            "INSERT INTO knowledge_documents \
             (project_id, collection, id, body, metadata, sha256, bytes, chunks, created_at, \
             updated_at) VALUES (",
        );
        upsert
            .bind(put.collection.project)
            .push(", ")
            .bind(put.collection.name.as_str())
            .push(", ")
            .bind(put.id.as_str())
            .push(", ")
            .bind(put.text.as_str())
            .push(", ")
            .bind(&put.metadata)
            .push(", ")
            .bind(put.sha256.as_str())
            .push(", ")
            .bind(put.text.len() as i64)
            .push(", ")
            .bind(put.chunks.len() as i64)
            .push(", ")
            .bind(created_at)
            .push(", ")
            .bind(now)
            .push(
                ") ON CONFLICT (project_id, collection, id) DO UPDATE SET body = excluded.body, \
                 metadata = excluded.metadata, sha256 = excluded.sha256, bytes = excluded.bytes, \
                 chunks = excluded.chunks, updated_at = excluded.updated_at",
            );
        upsert.execute(On::Tx(&mut tx)).await?;
        let indexed: Vec<(usize, &crate::NewChunk)> = put.chunks.iter().enumerate().collect();
        for batch in indexed.chunks(CHUNKS_PER_INSERT) {
            let mut insert = Sql::<D>::new(
                "INSERT INTO knowledge_chunks \
                 (project_id, collection, document_id, chunk_index, body, embedding) ",
            );
            insert.values(batch, |(index, chunk)| {
                [
                    put.collection.project.into(),
                    put.collection.name.clone().into(),
                    put.id.clone().into(),
                    (*index as i64).into(),
                    chunk.text.clone().into(),
                    encode_embedding(&chunk.embedding).into(),
                ]
            });
            insert.execute(On::Tx(&mut tx)).await?;
        }
        let new_document = i64::from(existing.is_none());
        let mut update = Sql::<D>::new("UPDATE knowledge_collections SET documents = documents + ");
        update
            .bind(new_document)
            .push(", chunks = chunks + ")
            .bind(put.chunks.len() as i64 - old_chunks)
            .push(", updated_at = ")
            .bind(now);
        if !put.chunks.is_empty() {
            update
                .push(", model = ")
                .bind(put.model.as_str())
                .push(", dimension = ")
                .bind(dimension);
        }
        update
            .push(" WHERE ")
            .named("name", put.collection.project, &put.collection.name)
            .execute(On::Tx(&mut tx))
            .await?;
        let stored = self
            .document_row(&put.collection, &put.id, On::Tx(&mut tx))
            .await?
            .ok_or_else(|| Error::Corrupt("a document vanished inside its own write".into()))?;
        tx.commit().await?;
        Ok(match existing {
            Some(_) => PutOutcome::Replaced(stored),
            None => PutOutcome::Created(stored),
        })
    }

    async fn delete_document(&self, collection: &CollectionKey, id: &str) -> Result<bool> {
        let mut tx = self.db.writer().begin().await?;
        let Some(existing) = self.document_row(collection, id, On::Tx(&mut tx)).await? else {
            // Tells an unknown collection from an unknown document.
            self.collection_row(collection, On::Tx(&mut tx)).await?;
            return Ok(false);
        };
        Sql::<D>::new("DELETE FROM knowledge_chunks WHERE ")
            .named("collection", collection.project, &collection.name)
            .push(" AND document_id = ")
            .bind(id)
            .execute(On::Tx(&mut tx))
            .await?;
        Sql::<D>::new("DELETE FROM knowledge_documents WHERE ")
            .named("collection", collection.project, &collection.name)
            .push(" AND id = ")
            .bind(id)
            .execute(On::Tx(&mut tx))
            .await?;
        Sql::<D>::new(
            "UPDATE knowledge_collections SET version = version + 1, documents = documents - 1, \
             chunks = chunks - ",
        )
        .bind(existing.chunks)
        .push(", updated_at = ")
        .bind(now_micros())
        .push(" WHERE ")
        .named("name", collection.project, &collection.name)
        .execute(On::Tx(&mut tx))
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn list_documents(
        &self,
        collection: &CollectionKey,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<DocumentRow>> {
        self.collection_row(collection, self.on_read()).await?;
        let mut sql = Sql::<D>::new(format!(
            "SELECT {DOCUMENT_COLUMNS} FROM knowledge_documents WHERE "
        ));
        sql.named("collection", collection.project, &collection.name);
        if let Some(after) = after {
            sql.push(" AND id > ").bind(after);
        }
        sql.push(" ORDER BY id LIMIT ")
            .bind(i64::from(limit.clamp(1, crate::MAX_PAGE)));
        let rows = sql.fetch_all(self.on_read()).await?;
        rows.iter().map(document).collect()
    }

    async fn get_document(
        &self,
        collection: &CollectionKey,
        id: &str,
    ) -> Result<(DocumentRow, String, Vec<String>)> {
        let mut tx = self.db.reader().begin().await?;
        let row = Sql::<D>::new(format!(
            "SELECT {DOCUMENT_COLUMNS}, body FROM knowledge_documents WHERE "
        ))
        .named("collection", collection.project, &collection.name)
        .push(" AND id = ")
        .bind(id)
        .fetch_optional(On::Tx(&mut tx))
        .await?;
        let Some(row) = row else {
            self.collection_row(collection, On::Tx(&mut tx)).await?;
            return Err(Error::NotFound(format!(
                "document `{id}` in collection `{}`",
                collection.name
            )));
        };
        let chunks = Sql::<D>::new("SELECT body FROM knowledge_chunks WHERE ")
            .named("collection", collection.project, &collection.name)
            .push(" AND document_id = ")
            .bind(id)
            .push(" ORDER BY chunk_index")
            .fetch_all(On::Tx(&mut tx))
            .await?
            .iter()
            .map(|r| r.text("body"))
            .collect::<Result<Vec<String>>>()?;
        tx.commit().await?;
        Ok((document(&row)?, row.text("body")?, chunks))
    }

    async fn collection_chunks(&self, key: &CollectionKey) -> Result<CollectionChunks> {
        // The collection's version before and after the read must agree: a write in between
        // (which moves it) means the rows may mix two versions, and the read is done again.
        loop {
            let before = self.collection_row(key, self.on_read()).await?;
            let rows = Sql::<D>::new(
                "SELECT c.document_id, c.chunk_index, c.body, c.embedding, d.metadata \
                 FROM knowledge_chunks c JOIN knowledge_documents d \
                 ON d.project_id = c.project_id AND d.collection = c.collection \
                 AND d.id = c.document_id WHERE c.project_id = ",
            )
            .bind(key.project)
            .push(" AND c.collection = ")
            .bind(key.name.as_str())
            .push(" ORDER BY c.document_id, c.chunk_index")
            .fetch_all(self.on_read())
            .await?;
            let after = self.collection_row(key, self.on_read()).await?;
            if after.version != before.version {
                continue;
            }
            let chunks = rows
                .iter()
                .map(|row| {
                    Ok(ChunkRow {
                        document_id: row.text("document_id")?,
                        chunk_index: row.int("chunk_index")?,
                        text: row.text("body")?,
                        embedding: decode_embedding(&row.bytes("embedding")?)?,
                        metadata: row.json("metadata")?,
                    })
                })
                .collect::<Result<Vec<ChunkRow>>>()?;
            return Ok(CollectionChunks {
                collection: after,
                chunks,
            });
        }
    }

    async fn reembed_collection(&self, reembedding: Reembedding) -> Result<()> {
        let mut tx = self.db.writer().begin().await?;
        let moved = Sql::<D>::new("UPDATE knowledge_collections SET version = version + 1 ")
            .push("WHERE ")
            .named(
                "name",
                reembedding.collection.project,
                &reembedding.collection.name,
            )
            .push(" AND version = ")
            .bind(reembedding.from_version)
            .execute(On::Tx(&mut tx))
            .await?;
        if moved == 0 {
            let row = self
                .collection_row(&reembedding.collection, On::Tx(&mut tx))
                .await?;
            return Err(Error::Stale(format!(
                "collection `{}` changed while it was re-embedded (version {} → {})",
                reembedding.collection.name, reembedding.from_version, row.version
            )));
        }
        let dimension = reembedding
            .embeddings
            .first()
            .map_or(0, |(_, _, e)| e.len()) as i64;
        let mut updated = 0i64;
        for (document_id, chunk_index, embedding) in &reembedding.embeddings {
            if embedding.len() as i64 != dimension {
                return Err(Error::InvalidInput(
                    "the new embeddings differ in dimension".into(),
                ));
            }
            updated += Sql::<D>::new("UPDATE knowledge_chunks SET embedding = ")
                .bind(encode_embedding(embedding))
                .push(" WHERE ")
                .named(
                    "collection",
                    reembedding.collection.project,
                    &reembedding.collection.name,
                )
                .push(" AND document_id = ")
                .bind(document_id.as_str())
                .push(" AND chunk_index = ")
                .bind(*chunk_index)
                .execute(On::Tx(&mut tx))
                .await? as i64;
        }
        let row = self
            .collection_row(&reembedding.collection, On::Tx(&mut tx))
            .await?;
        if updated != row.chunks {
            return Err(Error::Stale(format!(
                "{updated} of the collection's {} chunks were given new embeddings",
                row.chunks
            )));
        }
        Sql::<D>::new("UPDATE knowledge_collections SET embedding_route = ")
            .bind(reembedding.embedding_route.as_str())
            .push(", model = ")
            .bind(reembedding.model.as_str())
            .push(", dimension = ")
            .bind(if row.chunks > 0 {
                Some(dimension)
            } else {
                None
            })
            .push(", updated_at = ")
            .bind(now_micros())
            .push(" WHERE ")
            .named(
                "name",
                reembedding.collection.project,
                &reembedding.collection.name,
            )
            .execute(On::Tx(&mut tx))
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

//! The knowledge service as the HTTP edge sees it (`stead_http::knowledge::KnowledgeApi`).

use async_trait::async_trait;
use serde_json::Value;
use stead_http::knowledge::KnowledgeApi;
use stead_http::views::{
    CollectionList, CollectionView, DocumentList, DocumentText, DocumentView, QueryAnswer,
    QueryHit, StoredDocument,
};
use stead_http::ApiError;
use stead_persistence::{CollectionKey, PutOutcome};

use super::{store_error, Knowledge};

#[async_trait]
impl KnowledgeApi for Knowledge {
    async fn create_collection(
        &self,
        key: &CollectionKey,
        embedding_route: Option<&str>,
    ) -> Result<(CollectionView, bool), ApiError> {
        let (row, created) = Knowledge::create_collection(self, key, embedding_route).await?;
        Ok(((&row).into(), created))
    }

    async fn list_collections(&self, project: uuid::Uuid) -> Result<CollectionList, ApiError> {
        let rows = self
            .store()
            .list_collections(project)
            .await
            .map_err(store_error)?;
        Ok(CollectionList {
            collections: rows.iter().map(CollectionView::from).collect(),
        })
    }

    async fn get_collection(&self, key: &CollectionKey) -> Result<CollectionView, ApiError> {
        Ok((&self.collection(key).await?).into())
    }

    async fn delete_collection(&self, key: &CollectionKey) -> Result<(), ApiError> {
        if self
            .store()
            .delete_collection(key)
            .await
            .map_err(store_error)?
        {
            Ok(())
        } else {
            Err(store_error(stead_persistence::Error::NotFound(format!(
                "collection `{}`",
                key.name
            ))))
        }
    }

    async fn put_document(
        &self,
        collection: &CollectionKey,
        id: &str,
        text: &str,
        metadata: Option<Value>,
        api_key: Option<String>,
    ) -> Result<(StoredDocument, bool), ApiError> {
        let outcome =
            Knowledge::put_document(self, collection, id, text, metadata, api_key).await?;
        let created = matches!(outcome, PutOutcome::Created(_));
        let stored = StoredDocument {
            document: outcome.document().into(),
            outcome: match outcome {
                PutOutcome::Created(_) => "created",
                PutOutcome::Replaced(_) => "replaced",
                PutOutcome::Unchanged(_) => "unchanged",
            }
            .to_string(),
        };
        Ok((stored, created))
    }

    async fn list_documents(
        &self,
        collection: &CollectionKey,
        after: Option<&str>,
        limit: u32,
    ) -> Result<DocumentList, ApiError> {
        let rows = self
            .store()
            .list_documents(collection, after, limit)
            .await
            .map_err(store_error)?;
        let next_after = (rows.len() == limit as usize)
            .then(|| rows.last().map(|d| d.id.clone()))
            .flatten();
        Ok(DocumentList {
            documents: rows.iter().map(DocumentView::from).collect(),
            next_after,
        })
    }

    async fn get_document(
        &self,
        collection: &CollectionKey,
        id: &str,
    ) -> Result<DocumentText, ApiError> {
        let (row, text, chunk_texts) = self
            .store()
            .get_document(collection, id)
            .await
            .map_err(store_error)?;
        Ok(DocumentText {
            document: (&row).into(),
            text,
            chunk_texts,
        })
    }

    async fn delete_document(&self, collection: &CollectionKey, id: &str) -> Result<(), ApiError> {
        if self
            .store()
            .delete_document(collection, id)
            .await
            .map_err(store_error)?
        {
            Ok(())
        } else {
            Err(store_error(stead_persistence::Error::NotFound(format!(
                "document `{id}` in collection `{}`",
                collection.name
            ))))
        }
    }

    async fn query(
        &self,
        collection: &CollectionKey,
        body: Value,
        api_key: Option<String>,
    ) -> Result<QueryAnswer, ApiError> {
        let query = self.parse_query(&body)?;
        let mode = query.mode;
        let hits = Knowledge::query(
            self,
            collection,
            query,
            &stead_router::CallOptions {
                api_key,
                ..Default::default()
            },
        )
        .await?;
        Ok(QueryAnswer {
            collection: collection.name.clone(),
            mode: mode.as_str().to_string(),
            results: hits
                .into_iter()
                .map(|h| QueryHit {
                    document_id: h.document_id,
                    chunk_index: h.chunk_index,
                    chunk: h.chunk,
                    score: f64::from(h.score),
                    metadata: h.metadata,
                })
                .collect(),
        })
    }
}

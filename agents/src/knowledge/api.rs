//! The knowledge service as the HTTP edge sees it (`stead_http::knowledge::KnowledgeApi`).

use async_trait::async_trait;
use serde_json::{json, Value};
use stead_http::knowledge::KnowledgeApi;
use stead_http::ApiError;
use stead_persistence::PutOutcome;

use super::{collection_json, document_json, store_error, Knowledge};

#[async_trait]
impl KnowledgeApi for Knowledge {
    async fn create_collection(
        &self,
        name: &str,
        embedding_route: Option<&str>,
    ) -> Result<(Value, bool), ApiError> {
        let (row, created) = Knowledge::create_collection(self, name, embedding_route).await?;
        Ok((collection_json(&row), created))
    }

    async fn list_collections(&self) -> Result<Value, ApiError> {
        let rows = self.store().list_collections().await.map_err(store_error)?;
        Ok(json!({ "collections": rows.iter().map(collection_json).collect::<Vec<_>>() }))
    }

    async fn get_collection(&self, name: &str) -> Result<Value, ApiError> {
        Ok(collection_json(&self.collection(name).await?))
    }

    async fn delete_collection(&self, name: &str) -> Result<(), ApiError> {
        if self
            .store()
            .delete_collection(name)
            .await
            .map_err(store_error)?
        {
            Ok(())
        } else {
            Err(store_error(stead_persistence::Error::NotFound(format!(
                "collection `{name}`"
            ))))
        }
    }

    async fn put_document(
        &self,
        collection: &str,
        id: &str,
        text: &str,
        metadata: Option<Value>,
        api_key: Option<String>,
    ) -> Result<(Value, bool), ApiError> {
        let outcome =
            Knowledge::put_document(self, collection, id, text, metadata, api_key).await?;
        let created = matches!(outcome, PutOutcome::Created(_));
        let mut body = document_json(outcome.document());
        body["outcome"] = json!(match outcome {
            PutOutcome::Created(_) => "created",
            PutOutcome::Replaced(_) => "replaced",
            PutOutcome::Unchanged(_) => "unchanged",
        });
        Ok((body, created))
    }

    async fn list_documents(
        &self,
        collection: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Value, ApiError> {
        let rows = self
            .store()
            .list_documents(collection, after, limit)
            .await
            .map_err(store_error)?;
        let next_after = (rows.len() == limit as usize)
            .then(|| rows.last().map(|d| d.id.clone()))
            .flatten();
        Ok(json!({
            "documents": rows.iter().map(document_json).collect::<Vec<_>>(),
            "next_after": next_after,
        }))
    }

    async fn get_document(&self, collection: &str, id: &str) -> Result<Value, ApiError> {
        let (row, text, chunks) = self
            .store()
            .get_document(collection, id)
            .await
            .map_err(store_error)?;
        let mut body = document_json(&row);
        body["text"] = json!(text);
        body["chunk_texts"] = json!(chunks);
        Ok(body)
    }

    async fn delete_document(&self, collection: &str, id: &str) -> Result<(), ApiError> {
        if self
            .store()
            .delete_document(collection, id)
            .await
            .map_err(store_error)?
        {
            Ok(())
        } else {
            Err(store_error(stead_persistence::Error::NotFound(format!(
                "document `{id}` in collection `{collection}`"
            ))))
        }
    }

    async fn query(
        &self,
        collection: &str,
        body: Value,
        api_key: Option<String>,
    ) -> Result<Value, ApiError> {
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
        Ok(json!({
            "collection": collection,
            "mode": mode.as_str(),
            "results": hits.iter().map(|h| h.to_json()).collect::<Vec<_>>(),
        }))
    }
}

//! The `knowledge` agent tool (docs/knowledge.md, "The knowledge tool"): `{query}` (and, when
//! the agent may read several collections, an optional `collection`) → the best chunks of the
//! collections this agent may read, each with its document id for the model to cite. It only
//! reads: idempotent, and by default without approval.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use stead_actors::tools::{Tool, ToolContext, ToolError, ToolInfo};

use super::{Hit, Knowledge, Query, SearchMode};

/// Chunks a call returns when the configuration names no `top_k`.
pub const DEFAULT_TOP_K: usize = 4;

pub struct KnowledgeTool {
    pub info: ToolInfo,
    /// `None` where no service runs (the replay check builds agents without one).
    pub service: Option<Arc<Knowledge>>,
    /// The collections this tool reads.
    pub collections: Vec<String>,
    pub top_k: usize,
    pub mode: SearchMode,
}

impl KnowledgeTool {
    /// The default description the model reads.
    pub fn default_description(collections: &[String]) -> String {
        format!(
            "Search the knowledge base ({}) for passages relevant to a question. Returns the \
             best passages with their document ids; cite the ids you use as [document_id].",
            collections.join(", ")
        )
    }
}

#[async_trait]
impl Tool for KnowledgeTool {
    // A search changes nothing.
    stead_actors::tool_info_accessors!(idempotent = true);

    fn parameters(&self) -> Value {
        let mut properties = json!({
            "query": { "type": "string", "minLength": 1, "description": "What to look for" }
        });
        if self.collections.len() > 1 {
            properties["collection"] = json!({
                "type": "string",
                "enum": self.collections,
                "description": "One collection to search (default: all)"
            });
        }
        json!({
            "type": "object",
            "properties": properties,
            "required": ["query"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, arguments: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let service = self
            .service
            .as_ref()
            .ok_or_else(|| ToolError("knowledge collections are not available here".into()))?;
        let text = arguments["query"]
            .as_str()
            .filter(|q| !q.trim().is_empty())
            .ok_or_else(|| ToolError("`query` must be a non-empty string".into()))?;
        let collections: Vec<&String> = match arguments["collection"].as_str() {
            Some(one) => self.collections.iter().filter(|c| *c == one).collect(),
            None => self.collections.iter().collect(),
        };
        if collections.is_empty() {
            return Err(ToolError(format!(
                "no such collection; this tool reads {}",
                self.collections.join(", ")
            )));
        }
        // Charged to the session's principal and logged with the session, like its model
        // calls (before, charged to no one, they escaped every key's budget and rate limit).
        let charge = stead_router::CallOptions {
            api_key: Some(context.principal.clone()),
            session_id: Some(context.session_id),
            ..Default::default()
        };
        let mut hits: Vec<(String, Hit)> = Vec::new();
        for collection in collections {
            let query = Query {
                text: Some(text.to_string()),
                vector: None,
                top_k: self.top_k,
                filter: Default::default(),
                mode: self.mode,
            };
            // The session's project decides which collection the configured name means.
            let key = stead_persistence::CollectionKey::new(context.project, collection.clone());
            let found = service
                .query(&key, query, &charge)
                .await
                .map_err(|e| ToolError(format!("{collection}: {}", e.message)))?;
            hits.extend(found.into_iter().map(|h| (collection.clone(), h)));
        }
        // Scores of one mode compare across collections of one embedding model.
        hits.sort_by(|a, b| b.1.score.total_cmp(&a.1.score));
        hits.truncate(self.top_k);
        Ok(json!({
            "results": hits
                .iter()
                .map(|(collection, h)| json!({
                    "document_id": h.document_id,
                    "collection": collection,
                    "chunk": h.chunk,
                    "score": (h.score * 1000.0).round() / 1000.0,
                }))
                .collect::<Vec<_>>()
        }))
    }
}

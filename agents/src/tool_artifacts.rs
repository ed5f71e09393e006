//! Files that tools return (an MCP server's image, audio or binary resource), kept in the
//! artifact store as the session's artifacts, so that a journal names them instead of holding
//! their bytes and the model can be shown them (docs/artifacts.md, "Tools' files").

use std::sync::Arc;

use anyhow::Context;
use axum::body::Bytes;
use base64::Engine as _;
use stead_actors::tools::ToolContext;
use stead_actors::TranscriptEntry;
use stead_artifacts::BlobStore;
use stead_persistence::{Artifact, Artifacts};
use stead_router::chat::{ChatMessage, Image, IMAGE_TYPES};
use uuid::Uuid;

/// Where tools' files go: the blob store and the artifact rows beside the journal.
pub struct ToolArtifacts {
    blobs: BlobStore,
    rows: Arc<dyn Artifacts>,
    /// The largest file kept (`artifacts.max_bytes`, as for uploads); a larger one is named by
    /// its size only.
    max_bytes: usize,
}

impl ToolArtifacts {
    pub fn new(blobs: BlobStore, rows: Arc<dyn Artifacts>, max_bytes: usize) -> Arc<Self> {
        Arc::new(ToolArtifacts {
            blobs,
            rows,
            max_bytes,
        })
    }

    /// Keeps `bytes` as an artifact of the calling session, created by `agent:{call_id}`; its
    /// type read from the bytes (`declared`, the tool's word, is a hint only).
    pub async fn save(
        &self,
        bytes: Vec<u8>,
        declared: Option<&str>,
        context: &ToolContext,
    ) -> anyhow::Result<Artifact> {
        anyhow::ensure!(
            bytes.len() <= self.max_bytes,
            "{} bytes: over artifacts.max_bytes ({})",
            bytes.len(),
            self.max_bytes
        );
        let content_type = stead_artifacts::content_type(declared, &bytes);
        let stored = self
            .blobs
            .put(Bytes::from(bytes))
            .await
            .context("store the tool's file")?;
        let artifact = Artifact {
            id: Uuid::now_v7(),
            sha256: stored.sha256,
            size: stored.size as i64,
            content_type,
            session_id: Some(context.session_id),
            project_id: context.project,
            created_by: format!("agent:{}", context.call_id),
            created_at: stead_persistence::stored_now(),
        };
        self.rows
            .insert_artifact(&artifact)
            .await
            .context("record the tool's file")?;
        Ok(artifact)
    }
}

/// The images tools returned in a transcript's results (blocks with an `artifact_id` and an
/// image `content_type`), shown to a model that sees images: one user message after each run
/// of tool results that brought some (a tool message carries text only in OpenAI's API), its
/// text naming them. `messages` are `router_request`'s: one per transcript entry after
/// `offset` leading ones; images whose bytes the store no longer has are left out.
pub async fn show_tool_images(
    blobs: &BlobStore,
    transcript: &stead_actors::Transcript,
    messages: &mut Vec<ChatMessage>,
    offset: usize,
) {
    let wanted = transcript.iter().any(|e| !tool_images(e).is_empty());
    if !wanted {
        return;
    }
    let mut rest = std::mem::take(messages).into_iter();
    messages.extend(rest.by_ref().take(offset));
    let mut pending = ChatMessage::user(String::new());
    let mut names = Vec::new();
    for (entry, message) in transcript.iter().zip(rest.by_ref()) {
        if !matches!(entry, TranscriptEntry::Tool { .. }) {
            flush(messages, &mut pending, &mut names);
        }
        messages.push(message);
        for (id, sha256, content_type) in tool_images(entry) {
            if let Ok(bytes) = blobs.get(sha256, None).await {
                let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
                pending.images.push(Image::base64(content_type, &data));
                names.push(id.to_string());
            }
        }
    }
    flush(messages, &mut pending, &mut names);
    messages.extend(rest);
}

fn flush(messages: &mut Vec<ChatMessage>, pending: &mut ChatMessage, names: &mut Vec<String>) {
    if names.is_empty() {
        return;
    }
    let mut message = std::mem::replace(pending, ChatMessage::user(String::new()));
    message.content = format!(
        "[the tool results above returned {}: artifact {}]",
        if names.len() == 1 {
            "this image"
        } else {
            "these images"
        },
        names.join(", artifact ")
    );
    messages.push(message);
    names.clear();
}

/// (artifact id, SHA-256, content type) of each stored image in a tool result.
fn tool_images(entry: &TranscriptEntry) -> Vec<(&str, &str, &str)> {
    let TranscriptEntry::Tool { content, .. } = entry else {
        return Vec::new();
    };
    content["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| {
            let id = block["artifact_id"].as_str()?;
            let sha256 = block["sha256"].as_str()?;
            let kind = block["content_type"].as_str()?;
            IMAGE_TYPES.contains(&kind).then_some((id, sha256, kind))
        })
        .collect()
}

//! Parts of the HTTP edge's state that `serve` builds from the configuration.

use std::sync::Arc;

use anyhow::Context;
use stead_actors::session::SessionRegistry;
use stead_config::Config;
use stead_persistence::JournalStore;

/// The evaluation engine, its judge asking through the model router.
pub(super) fn evals(
    store: &Arc<dyn JournalStore>,
    sessions: &Arc<SessionRegistry>,
    router: &Arc<stead_router::Router>,
) -> Option<Arc<stead_evals::Runner>> {
    Some(Arc::new(stead_evals::Runner {
        sessions: store.clone(),
        evals: store.clone(),
        registry: sessions.clone(),
        judge: Some(Arc::new(stead_agents::models::RouterJudge {
            router: router.clone(),
        })),
    }))
}

/// The artifact store `[artifacts]` configures (docs/artifacts.md).
pub(super) fn artifacts(
    config: &Config,
) -> anyhow::Result<Option<Arc<stead_http::artifacts::Artifacts>>> {
    let blobs = blobs(config)?;
    tracing::info!(store = ?blobs, "artifact store");
    Ok(Some(Arc::new(stead_http::artifacts::Artifacts {
        blobs,
        max_bytes: config.artifacts.max_bytes,
    })))
}

/// The artifact store's blobs (the edge writes them; sessions read their attachments).
pub(super) fn blobs(config: &Config) -> anyhow::Result<stead_artifacts::BlobStore> {
    let store = config.artifacts.blob_config(&config.server.data_dir);
    stead_artifacts::BlobStore::open(&store).context("open the artifact store")
}

/// The MCP servers, started in the background (a slow or broken one does not hold up the
/// start), keeping the files their tools return as the calling sessions' artifacts.
pub(super) fn mcp(
    config: &Config,
    store: &Arc<dyn JournalStore>,
    blobs: &stead_artifacts::BlobStore,
) -> anyhow::Result<Arc<stead_agents::mcp::McpRegistry>> {
    let mcp = stead_agents::mcp::McpRegistry::new(&config.mcp_servers)?;
    mcp.keep_files_in(&stead_agents::tool_artifacts::ToolArtifacts::new(
        blobs.clone(),
        store.clone(),
        config.artifacts.max_bytes,
    ));
    mcp.start();
    Ok(mcp)
}

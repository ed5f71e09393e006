//! The artifacts of an export (docs/replay.md, "Export and import"): the session's own
//! artifacts written after its events, bytes in base64; on import their bytes stored again
//! (each checked against its SHA-256) and their rows made for the new session.

use anyhow::Context;
use base64::Engine as _;
use stead_actors::replay::{self, ArtifactRecord, Export, ExportHeader};
use stead_artifacts::{BlobStore, Stored};
use stead_config::Config;
use stead_persistence::{Artifact, JournalStore};
use uuid::Uuid;

fn blobs(config: &Config) -> anyhow::Result<BlobStore> {
    let store = config.artifacts.blob_config(&config.server.data_dir);
    BlobStore::open(&store).context("open the artifact store")
}

/// Writes the session's artifacts as export lines; how many.
pub(super) async fn export(
    config: &Config,
    store: &dyn JournalStore,
    header: &ExportHeader,
    out: &mut (dyn std::io::Write + Send),
) -> anyhow::Result<usize> {
    let rows = store.session_artifacts(header.session_id).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let blobs = blobs(config)?;
    for artifact in &rows {
        let bytes = blobs
            .get(&artifact.sha256, None)
            .await
            .with_context(|| format!("artifact {}: read its bytes", artifact.id))?;
        replay::write_artifact(
            out,
            ArtifactRecord {
                id: artifact.id,
                sha256: artifact.sha256.clone(),
                content_type: artifact.content_type.clone(),
                size: artifact.size,
                created_at: artifact.created_at,
                data: base64::engine::general_purpose::STANDARD.encode(&bytes),
            },
        )?;
    }
    Ok(rows.len())
}

/// Stores an export's artifacts' bytes, each checked against the digest and size it names.
pub(super) async fn store_blobs(config: &Config, export: &Export) -> anyhow::Result<Vec<Stored>> {
    if export.artifacts.is_empty() {
        return Ok(Vec::new());
    }
    let blobs = blobs(config)?;
    let mut stored = Vec::with_capacity(export.artifacts.len());
    for artifact in &export.artifacts {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&artifact.data)
            .with_context(|| format!("artifact {}: its data is not base64", artifact.sha256))?;
        let put = blobs.put(bytes.into()).await?;
        anyhow::ensure!(
            put.sha256 == artifact.sha256 && put.size as i64 == artifact.size,
            "artifact {}: its bytes do not match its sha256 and size (the export was altered)",
            artifact.sha256
        );
        stored.push(put);
    }
    Ok(stored)
}

/// The imported session's artifact rows (the ids the messages now name).
pub(super) async fn insert_rows(
    store: &dyn JournalStore,
    session: Uuid,
    export: &Export,
    stored: Vec<Stored>,
) -> anyhow::Result<()> {
    for (artifact, blob) in export.artifacts.iter().zip(stored) {
        store
            .insert_artifact(&Artifact {
                id: artifact.id,
                sha256: blob.sha256,
                size: blob.size as i64,
                content_type: artifact.content_type.clone(),
                session_id: Some(session),
                project_id: stead_persistence::DEFAULT_PROJECT,
                created_by: "import".into(),
                created_at: artifact.created_at,
            })
            .await?;
    }
    Ok(())
}

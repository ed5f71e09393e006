//! Stead's artifact store (docs/artifacts.md): the bytes of what sessions upload or tools
//! return — images, audio, documents — kept as content-addressed blobs, named by their SHA-256,
//! in an object store: a directory under the data dir by default, any S3-compatible store when
//! configured (both through the `object_store` crate). The same bytes uploaded twice are one
//! blob. This crate owns the blobs and the content type read from their first bytes
//! ([`sniff`]); which artifact belongs to which session, and when a blob may go, is the
//! database's (`stead-persistence`).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};
use sha2::{Digest, Sha256};

mod sniff;

pub use sniff::{content_type, sniff, TEXT_PLAIN};

/// Why the store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("no blob {0}")]
    NotFound(String),
    #[error("the range {start}..{end} is outside the blob's {size} bytes")]
    Range { start: u64, end: u64, size: u64 },
    #[error("`{0}` is not a SHA-256 in hex")]
    BadDigest(String),
    #[error("the object store failed: {0}")]
    Store(#[from] object_store::Error),
    #[error("the artifact store is misconfigured: {0}")]
    Config(String),
}

pub type Result<T> = std::result::Result<T, ArtifactError>;

/// Where the blobs live.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BlobConfig {
    /// A directory (created when missing).
    Filesystem { path: std::path::PathBuf },
    /// A bucket of an S3-compatible store. The keys come from the environment variables
    /// named here (never from the file).
    S3 {
        bucket: String,
        /// `http(s)://host:port` of a store other than AWS (MinIO, SeaweedFS, …).
        endpoint: Option<String>,
        #[serde(default = "default_region")]
        region: String,
        /// Key prefix inside the bucket.
        #[serde(default)]
        prefix: String,
        #[serde(default = "default_access_key_env")]
        access_key_env: String,
        #[serde(default = "default_secret_key_env")]
        secret_key_env: String,
    },
}

fn default_region() -> String {
    "us-east-1".into()
}

fn default_access_key_env() -> String {
    "AWS_ACCESS_KEY_ID".into()
}

fn default_secret_key_env() -> String {
    "AWS_SECRET_ACCESS_KEY".into()
}

/// A blob as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    pub size: u64,
}

/// The blobs, by SHA-256.
#[derive(Clone)]
pub struct BlobStore {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    /// What the store is, for logs and errors (`filesystem /path`, `s3 bucket`).
    describe: String,
}

impl std::fmt::Debug for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

impl BlobStore {
    /// The store `config` names; `S3` reads its keys from the environment.
    pub fn open(config: &BlobConfig) -> Result<Self> {
        match config {
            BlobConfig::Filesystem { path } => {
                std::fs::create_dir_all(path).map_err(|e| {
                    ArtifactError::Config(format!("cannot create {}: {e}", path.display()))
                })?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(path)?;
                Ok(BlobStore {
                    store: Arc::new(store),
                    prefix: String::new(),
                    describe: format!("filesystem {}", path.display()),
                })
            }
            BlobConfig::S3 {
                bucket,
                endpoint,
                region,
                prefix,
                access_key_env,
                secret_key_env,
            } => {
                let key = |name: &str| {
                    std::env::var(name).map_err(|_| {
                        ArtifactError::Config(format!("the environment variable {name} is not set"))
                    })
                };
                let mut builder = object_store::aws::AmazonS3Builder::new()
                    .with_bucket_name(bucket)
                    .with_region(region)
                    .with_access_key_id(key(access_key_env)?)
                    .with_secret_access_key(key(secret_key_env)?);
                if let Some(endpoint) = endpoint {
                    builder = builder
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"))
                        .with_virtual_hosted_style_request(false);
                }
                Ok(BlobStore {
                    store: Arc::new(builder.build()?),
                    prefix: prefix.trim_matches('/').to_string(),
                    describe: format!("s3 bucket {bucket}"),
                })
            }
        }
    }

    /// Where blob `sha256` lives: `{prefix}/ab/cdef…` (two levels keep directories small).
    fn path(&self, sha256: &str) -> Result<Path> {
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ArtifactError::BadDigest(sha256.to_string()));
        }
        let sha256 = sha256.to_ascii_lowercase();
        let key = format!("{}/{}", &sha256[..2], &sha256[2..]);
        Ok(if self.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.prefix))
        })
    }

    /// Stores `bytes` under their SHA-256 (a blob already there is left as it is).
    pub async fn put(&self, bytes: Bytes) -> Result<Stored> {
        let sha256 = hex::encode(Sha256::digest(&bytes));
        let stored = Stored {
            sha256,
            size: bytes.len() as u64,
        };
        let path = self.path(&stored.sha256)?;
        match self.store.head(&path).await {
            Ok(meta) if meta.size == stored.size => return Ok(stored),
            Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
            Err(error) => return Err(error.into()),
        }
        self.store.put(&path, PutPayload::from(bytes)).await?;
        Ok(stored)
    }

    /// The blob's size.
    pub async fn size(&self, sha256: &str) -> Result<u64> {
        let path = self.path(sha256)?;
        match self.store.head(&path).await {
            Ok(meta) => Ok(meta.size),
            Err(object_store::Error::NotFound { .. }) => {
                Err(ArtifactError::NotFound(sha256.to_string()))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The blob's bytes, or `range` of them.
    pub async fn get(&self, sha256: &str, range: Option<Range<u64>>) -> Result<Bytes> {
        let path = self.path(sha256)?;
        let not_found = |error: object_store::Error| match error {
            object_store::Error::NotFound { .. } => ArtifactError::NotFound(sha256.to_string()),
            other => other.into(),
        };
        match range {
            None => Ok(self
                .store
                .get(&path)
                .await
                .map_err(not_found)?
                .bytes()
                .await?),
            Some(range) => {
                let size = self.size(sha256).await?;
                if range.start > range.end || range.end > size {
                    return Err(ArtifactError::Range {
                        start: range.start,
                        end: range.end,
                        size,
                    });
                }
                if range.is_empty() {
                    return Ok(Bytes::new());
                }
                Ok(self
                    .store
                    .get_range(&path, range)
                    .await
                    .map_err(not_found)?)
            }
        }
    }

    /// Deletes the blob (nothing when it is not there).
    pub async fn delete(&self, sha256: &str) -> Result<()> {
        let path = self.path(sha256)?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }
}

#[cfg(test)]
mod tests;

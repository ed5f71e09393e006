//! Several nodes on one PostgreSQL (`[cluster]`, docs/cluster.md): this node's membership (a
//! row in `cluster_nodes` whose heartbeat it keeps fresh), the sweep that takes over a dead
//! node's running sessions, and the forwarding of requests for sessions another node holds
//! ([`forward::Peers`], the HTTP edge's `Cluster`).

pub mod forward;

use std::sync::Arc;
use std::time::Duration;

use stead_actors::session::SessionRegistry;
use stead_persistence::{ClusterNode, JournalStore};

use crate::config::ClusterConfig;

/// What a node of a cluster runs with.
#[derive(Clone)]
pub struct Membership {
    pub node: ClusterNode,
    pub heartbeat: Duration,
    pub ttl: Duration,
    pub sweep: Duration,
    /// The shared node-to-node secret (from `cluster.secret_env`).
    pub secret: Arc<Vec<u8>>,
}

impl Membership {
    /// From the configuration and the environment; an unset or short secret stops the start.
    pub fn new(config: &ClusterConfig, node_id: &str) -> anyhow::Result<Membership> {
        let secret = std::env::var(&config.secret_env).map_err(|_| {
            anyhow::anyhow!(
                "cluster.secret_env: the environment variable {} is not set (every node needs the same cluster secret)",
                config.secret_env
            )
        })?;
        if secret.len() < 32 {
            anyhow::bail!(
                "cluster.secret_env: the cluster secret in {} is {} bytes; it needs at least 32",
                config.secret_env,
                secret.len()
            );
        }
        Ok(Membership {
            node: ClusterNode {
                node_id: node_id.to_string(),
                advertise_url: config.advertise_url.trim_end_matches('/').to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                starting: true,
            },
            heartbeat: Duration::from_secs(config.heartbeat_secs),
            ttl: Duration::from_secs(config.node_ttl_secs),
            sweep: Duration::from_secs(config.sweep_secs),
            secret: Arc::new(secret.into_bytes()),
        })
    }

    /// Registers the node (before it serves), then keeps its heartbeat fresh and sweeps for
    /// orphaned sessions until the returned tasks are aborted.
    pub async fn start(
        &self,
        store: Arc<dyn JournalStore>,
        sessions: Arc<SessionRegistry>,
    ) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
        store
            .heartbeat_node(&self.node)
            .await
            .map_err(|e| anyhow::anyhow!("cluster: cannot register this node: {e}"))?;
        tracing::info!(node = %self.node.node_id, url = %self.node.advertise_url, "joined the cluster");
        let beat = {
            let store = store.clone();
            let node = ClusterNode {
                starting: false,
                ..self.node.clone()
            };
            let every = self.heartbeat;
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    if let Err(error) = store.heartbeat_node(&node).await {
                        tracing::warn!(%error, "cluster: heartbeat failed");
                    }
                }
            })
        };
        let sweep = tokio::spawn(sweep(store, sessions, self.sweep));
        Ok(vec![beat, sweep])
    }
}

/// Orphans one sweep takes on.
const SWEEP_BATCH: usize = 100;
/// How long the sweep leaves alone a session it could not activate (an agent this node does
/// not configure, a child whose journal is not written yet), so that the others get their turn.
const SWEEP_BACKOFF: Duration = Duration::from_secs(60);

/// Every `every`, running sessions whose lease ran out (their node died mid-turn) are
/// activated here: the activation takes the lease (one node wins; the others see it held) and
/// carries the turn on under the recovery rules.
async fn sweep(store: Arc<dyn JournalStore>, sessions: Arc<SessionRegistry>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    let mut failing: std::collections::HashMap<uuid::Uuid, std::time::Instant> = Default::default();
    loop {
        tick.tick().await;
        failing.retain(|_, until| until.elapsed() < SWEEP_BACKOFF);
        let limit = u32::try_from(SWEEP_BATCH + failing.len()).unwrap_or(u32::MAX);
        let orphans = match store.orphaned_sessions(limit).await {
            Ok(orphans) => orphans,
            Err(error) => {
                tracing::warn!(%error, "cluster: cannot look for orphaned sessions");
                continue;
            }
        };
        let fresh: Vec<uuid::Uuid> = orphans
            .into_iter()
            .filter(|id| !failing.contains_key(id))
            .collect();
        for id in fresh {
            match sessions.session(id).await {
                Ok(_) => tracing::info!(session = %id, "cluster: took over a running session"),
                // Another node was quicker: nothing to back off from.
                Err(stead_actors::session::SessionError::HeldElsewhere(_)) => {}
                Err(error) => {
                    tracing::debug!(session = %id, %error, "cluster: not taken over");
                    failing.insert(id, std::time::Instant::now());
                }
            }
        }
    }
}

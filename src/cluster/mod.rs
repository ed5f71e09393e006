//! Several nodes on one PostgreSQL (`[cluster]`, docs/cluster.md): this node's membership (a
//! row in `cluster_nodes` whose heartbeat it keeps fresh), the sweep that takes over a dead
//! node's running sessions, and the forwarding of requests for sessions another node holds
//! ([`forward::Peers`], the HTTP edge's `Cluster`).

pub mod forward;
pub mod signature;

use std::sync::Arc;
use std::time::Duration;

use stead_actors::session::SessionRegistry;
use stead_persistence::{BudgetDecision, BudgetRequest, Budgets, ClusterNode, Leases};
use stead_router::{LedgerError, SharedLedger, SharedReservation};

use stead_config::ClusterConfig;

/// What a node of a cluster runs with.
#[derive(Clone)]
pub struct Membership {
    pub node: ClusterNode,
    pub heartbeat: Duration,
    pub ttl: Duration,
    pub sweep: Duration,
    /// The shared node-to-node secret (from `cluster.secret_env`).
    pub secret: Arc<Vec<u8>>,
    /// Told when another process took this node's id (this one's heartbeat had lapsed): the
    /// node must stop, as two live nodes with one id would take each other's sessions.
    pub superseded: Arc<tokio::sync::Notify>,
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
                instance: uuid::Uuid::new_v4(),
                starting: true,
            },
            heartbeat: Duration::from_secs(config.heartbeat_secs),
            ttl: Duration::from_secs(config.node_ttl_secs),
            sweep: Duration::from_secs(config.sweep_secs),
            secret: Arc::new(secret.into_bytes()),
            superseded: Arc::new(tokio::sync::Notify::new()),
        })
    }

    /// Registers the node (before it serves), then keeps its heartbeat fresh and sweeps for
    /// orphaned sessions until the returned tasks are aborted. Another live process holding
    /// this node id at another address is waited for until its heartbeat lapses; one that
    /// keeps beating stops the start.
    pub async fn start(
        &self,
        store: Arc<dyn Leases>,
        sessions: Arc<SessionRegistry>,
    ) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
        let patience = self.ttl + 2 * self.heartbeat;
        let started = std::time::Instant::now();
        loop {
            let registered = store
                .heartbeat_node(&self.node, self.ttl)
                .await
                .map_err(|e| anyhow::anyhow!("cluster: cannot register this node: {e}"))?;
            if registered {
                break;
            }
            let holder = store
                .cluster_nodes(self.ttl)
                .await
                .ok()
                .and_then(|nodes| nodes.into_iter().find(|n| n.node_id == self.node.node_id));
            let at = holder.map(|n| n.advertise_url).unwrap_or_default();
            anyhow::ensure!(
                started.elapsed() < patience,
                "cluster: node id `{}` is in use by a live node at {at}; every node needs a \
                 server.node_id of its own",
                self.node.node_id
            );
            tracing::warn!(node = %self.node.node_id, holder = %at,
                "cluster: this node id is held by a live process elsewhere; waiting for its \
                 heartbeat to lapse");
            tokio::time::sleep(self.heartbeat).await;
        }
        tracing::info!(node = %self.node.node_id, url = %self.node.advertise_url, "joined the cluster");
        let beat = {
            let store = store.clone();
            let node = ClusterNode {
                starting: false,
                ..self.node.clone()
            };
            let (every, ttl) = (self.heartbeat, self.ttl);
            let superseded = self.superseded.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    match store.heartbeat_node(&node, ttl).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::error!(node = %node.node_id,
                                "cluster: another process registered this node id while this \
                                 one's heartbeat had lapsed; this node stops");
                            superseded.notify_one();
                            return;
                        }
                        Err(error) => tracing::warn!(%error, "cluster: heartbeat failed"),
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
async fn sweep(store: Arc<dyn Leases>, sessions: Arc<SessionRegistry>, every: Duration) {
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

/// The router's strict budgets kept in the database the nodes share (docs/cluster.md): a
/// reservation made on any node counts on every node.
pub struct SharedBudgets {
    pub store: Arc<dyn Budgets>,
    pub node_id: String,
    /// A node whose heartbeat is older than this is dead: its reservations are booked as spent
    /// (`None`: a node alone, whose earlier runs' reservations are).
    pub node_ttl: Option<Duration>,
}

#[async_trait::async_trait]
impl SharedLedger for SharedBudgets {
    async fn reserve(
        &self,
        key: &str,
        amount: f64,
        budget: f64,
        window: Duration,
    ) -> Result<SharedReservation, LedgerError> {
        let request = BudgetRequest {
            key: key.to_string(),
            node_id: self.node_id.clone(),
            amount,
            budget,
            window,
            node_ttl: self.node_ttl,
        };
        match self.store.reserve_budget(&request).await {
            Ok(BudgetDecision::Reserved(id)) => Ok(SharedReservation::Reserved(id)),
            Ok(BudgetDecision::Refused {
                spent,
                reserved,
                window_start,
            }) => {
                let ends = window_start + chrono::Duration::from_std(window).unwrap_or_default();
                Ok(SharedReservation::Refused {
                    spent,
                    reserved,
                    retry_after: (ends - chrono::Utc::now()).to_std().unwrap_or_default(),
                })
            }
            Err(error) => {
                tracing::warn!(%error, "the shared budget ledger failed");
                Err(LedgerError(Box::new(error)))
            }
        }
    }

    async fn settle(&self, id: uuid::Uuid, cost: f64) {
        match self.store.settle_budget(id, cost).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(reservation = %id,
                "a budget reservation was already booked in full (this node looked dead)"),
            Err(error) => tracing::warn!(reservation = %id, %error,
                "a budget reservation could not be settled; it is booked in full when this node restarts"),
        }
    }

    async fn alert_once(
        &self,
        key: &str,
        threshold: f64,
    ) -> Result<Option<(f64, chrono::DateTime<chrono::Utc>)>, LedgerError> {
        self.store
            .alert_budget(key, threshold)
            .await
            .map_err(|error| LedgerError(Box::new(error)))
    }
}

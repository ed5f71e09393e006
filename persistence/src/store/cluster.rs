//! Cluster membership (docs/cluster.md): nodes register with their advertised address and keep
//! a heartbeat, judged on the same clock as leases (the database's on PostgreSQL); the sweep's
//! question — running sessions whose lease ran out — is answered here too.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::dialect::{Columns, Dialect, Sql};
use super::SqlStore;
use crate::types::now_micros;
use crate::{ClusterNode, NodeStatus, Result};

impl<D: Dialect> SqlStore<D> {
    /// `ago` before now, on the leases' clock.
    pub(super) fn push_ago(&self, sql: &mut Sql<D>, ago: Duration) {
        if D::DATABASE_CLOCK {
            sql.push("clock_timestamp() - make_interval(secs => ")
                .bind(ago.as_secs_f64().min(1e9))
                .push(")");
        } else {
            let now = now_micros() + self.clock_skew;
            let ago = chrono::Duration::from_std(ago).unwrap_or(chrono::Duration::MAX);
            sql.bind(
                now.checked_sub_signed(ago)
                    .unwrap_or(DateTime::<Utc>::UNIX_EPOCH),
            );
        }
    }

    pub(super) async fn heartbeat(&self, node: &ClusterNode, ttl: Duration) -> Result<bool> {
        let mut upsert = Sql::<D>::new(
            "INSERT INTO cluster_nodes (node_id, advertise_url, version, started_at, heartbeat_at, \
             instance) VALUES (",
        );
        upsert
            .bind(node.node_id.as_str())
            .push(", ")
            .bind(node.advertise_url.as_str())
            .push(", ")
            .bind(node.version.as_str())
            .push(", ");
        self.push_ago(&mut upsert, Duration::ZERO);
        upsert.push(", ");
        self.push_ago(&mut upsert, Duration::ZERO);
        upsert.push(", ").bind(node.instance.to_string()).push(
            ") ON CONFLICT (node_id) DO UPDATE SET advertise_url = excluded.advertise_url, \
             version = excluded.version, heartbeat_at = excluded.heartbeat_at, \
             instance = excluded.instance",
        );
        if node.starting {
            upsert.push(", started_at = excluded.started_at");
        }
        // This process's own row, or one of an older node version; when starting, also the row
        // of this node's predecessor (it advertised this address, which this process now
        // listens on) or of a process that died.
        upsert.push(
            " WHERE cluster_nodes.instance IS NULL OR cluster_nodes.instance = excluded.instance",
        );
        if node.starting {
            upsert.push(
                " OR cluster_nodes.advertise_url = excluded.advertise_url OR \
                 cluster_nodes.heartbeat_at < ",
            );
            self.push_ago(&mut upsert, ttl);
        }
        Ok(upsert.execute(self.on_write()).await? == 1)
    }

    pub(super) async fn nodes(&self, ttl: Duration) -> Result<Vec<NodeStatus>> {
        let mut select = Sql::<D>::new(
            "SELECT n.node_id, n.advertise_url, n.version, n.started_at, n.heartbeat_at, \
             (n.heartbeat_at >= ",
        );
        self.push_ago(&mut select, ttl);
        select.push(
            ") AS alive, (SELECT COUNT(*) FROM sessions s WHERE s.lease_owner = n.node_id \
             AND s.lease_expires_at > ",
        );
        self.push_ago(&mut select, Duration::ZERO);
        select.push(") AS sessions FROM cluster_nodes n ORDER BY n.node_id");
        let rows = select.fetch_all(self.on_read()).await?;
        rows.iter()
            .map(|row| {
                Ok(NodeStatus {
                    node_id: row.text("node_id")?,
                    advertise_url: row.text("advertise_url")?,
                    version: row.text("version")?,
                    started_at: row.time("started_at")?,
                    heartbeat_at: row.time("heartbeat_at")?,
                    alive: row.flag("alive")?,
                    sessions: row.int("sessions")?,
                })
            })
            .collect()
    }

    pub(super) async fn leave(&self, node: &ClusterNode) -> Result<()> {
        Sql::<D>::new("DELETE FROM cluster_nodes WHERE node_id = ")
            .bind(node.node_id.as_str())
            .push(" AND instance = ")
            .bind(node.instance.to_string())
            .execute(self.on_write())
            .await?;
        Ok(())
    }

    pub(super) async fn holder(&self, session_id: Uuid) -> Result<Option<String>> {
        let mut select = Sql::<D>::new("SELECT lease_owner FROM sessions WHERE id = ");
        select
            .bind(session_id)
            .push(" AND lease_owner IS NOT NULL AND lease_expires_at > ");
        self.push_ago(&mut select, Duration::ZERO);
        match select.fetch_optional(self.on_read()).await? {
            Some(row) => row.opt_text("lease_owner"),
            None => Ok(None),
        }
    }

    pub(super) async fn orphans(&self, limit: u32) -> Result<Vec<Uuid>> {
        let mut select = Sql::<D>::new(
            "SELECT id FROM sessions WHERE status = 'running' AND lease_expires_at < ",
        );
        self.push_ago(&mut select, Duration::ZERO);
        select
            .push(" ORDER BY lease_expires_at LIMIT ")
            .bind(i64::from(limit));
        let rows = select.fetch_all(self.on_read()).await?;
        rows.iter().map(|row| row.id("id")).collect()
    }
}

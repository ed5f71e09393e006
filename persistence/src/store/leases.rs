//! Session leases (docs/architecture.md, invariant 1): who runs a session's actor, and the fencing epoch its journal
//! writes are checked against.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::dialect::{Columns, Dialect, Sql};
use super::SqlStore;
use stead_model::Epoch;

use crate::types::now_micros;
use crate::{Error, Lease, Result};

/// `now + ttl`, saturating a TTL too large for chrono.
fn expiry(now: DateTime<Utc>, ttl: Duration) -> DateTime<Utc> {
    now + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX)
}

impl<D: Dialect> SqlStore<D> {
    /// Now, as leases are judged: the database's clock on PostgreSQL (nodes' clocks may
    /// disagree; the database is the one they share), this node's on SQLite.
    fn push_now(&self, sql: &mut Sql<D>) {
        if D::DATABASE_CLOCK {
            sql.push("clock_timestamp()");
        } else {
            sql.bind(now_micros() + self.clock_skew);
        }
    }

    /// Now plus `ttl`, on the same clock as [`Self::push_now`].
    fn push_until(&self, sql: &mut Sql<D>, ttl: Duration) {
        if D::DATABASE_CLOCK {
            sql.push("clock_timestamp() + make_interval(secs => ")
                .bind(ttl.as_secs_f64().min(1e9))
                .push(")");
        } else {
            sql.bind(expiry(now_micros() + self.clock_skew, ttl));
        }
    }

    pub(super) async fn acquire(
        &self,
        session_id: Uuid,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease> {
        let mut take = Sql::<D>::new("UPDATE sessions SET lease_owner = ");
        take.bind(owner)
            .push(", lease_epoch = lease_epoch + 1, lease_expires_at = ");
        self.push_until(&mut take, ttl);
        take.push(" WHERE id = ")
            .bind(session_id)
            .push(" AND (lease_owner IS NULL OR lease_owner = ")
            .bind(owner)
            .push(" OR lease_expires_at < ");
        self.push_now(&mut take);
        take.push(") RETURNING lease_epoch, lease_expires_at");
        if let Some(row) = take.fetch_optional(self.on_write()).await? {
            return Ok(Lease {
                owner: owner.to_string(),
                epoch: Epoch(row.int("lease_epoch")?),
                expires_at: row.time("lease_expires_at")?,
            });
        }
        let holder =
            Sql::<D>::new("SELECT lease_owner, lease_expires_at FROM sessions WHERE id = ")
                .bind(session_id)
                .fetch_optional(self.on_write())
                .await?;
        match holder {
            Some(row) => Err(Error::LeaseHeld {
                session_id,
                owner: row.opt_text("lease_owner")?.unwrap_or_default(),
                until: row.time("lease_expires_at")?,
            }),
            None => Err(Error::SessionNotFound(session_id)),
        }
    }

    pub(super) async fn renew(
        &self,
        session_id: Uuid,
        owner: &str,
        epoch: Epoch,
        ttl: Duration,
    ) -> Result<Lease> {
        let mut renew = Sql::<D>::new("UPDATE sessions SET lease_expires_at = ");
        self.push_until(&mut renew, ttl);
        renew
            .push(" WHERE id = ")
            .bind(session_id)
            .push(" AND lease_owner = ")
            .bind(owner)
            .push(" AND lease_epoch = ")
            .bind(epoch.0)
            .push(" RETURNING lease_expires_at");
        if let Some(row) = renew.fetch_optional(self.on_write()).await? {
            return Ok(Lease {
                owner: owner.to_string(),
                epoch,
                expires_at: row.time("lease_expires_at")?,
            });
        }
        let current = Sql::<D>::new("SELECT lease_epoch FROM sessions WHERE id = ")
            .bind(session_id)
            .fetch_optional(self.on_write())
            .await?;
        match current {
            Some(row) => Err(Error::Fenced {
                session_id,
                held: epoch,
                current: Epoch(row.int("lease_epoch")?),
            }),
            None => Err(Error::SessionNotFound(session_id)),
        }
    }

    pub(super) async fn release(&self, session_id: Uuid, owner: &str, epoch: Epoch) -> Result<()> {
        Sql::<D>::new("UPDATE sessions SET lease_owner = NULL, lease_expires_at = ")
            .bind(DateTime::<Utc>::UNIX_EPOCH)
            .push(" WHERE id = ")
            .bind(session_id)
            .push(" AND lease_owner = ")
            .bind(owner)
            .push(" AND lease_epoch = ")
            .bind(epoch.0)
            .execute(self.on_write())
            .await?;
        Ok(())
    }
}

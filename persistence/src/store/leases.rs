//! Session leases (docs/architecture.md, invariant 1): who runs a session's actor, and the fencing epoch its journal
//! writes are checked against.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::dialect::{Columns, Dialect, Sql};
use super::SqlStore;
use crate::types::now_micros;
use crate::{Error, Lease, Result};

/// `now + ttl`, saturating a TTL too large for chrono.
fn expiry(now: DateTime<Utc>, ttl: Duration) -> DateTime<Utc> {
    now + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX)
}

impl<D: Dialect> SqlStore<D> {
    pub(super) async fn acquire(
        &self,
        session_id: Uuid,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease> {
        let now = now_micros();
        let until = expiry(now, ttl);
        let taken = Sql::<D>::new("UPDATE sessions SET lease_owner = ")
            .bind(owner)
            .push(", lease_epoch = lease_epoch + 1, lease_expires_at = ")
            .bind(until)
            .push(" WHERE id = ")
            .bind(session_id)
            .push(" AND (lease_owner IS NULL OR lease_owner = ")
            .bind(owner)
            .push(" OR lease_expires_at < ")
            .bind(now)
            .push(") RETURNING lease_epoch")
            .fetch_optional(self.on_write())
            .await?;
        if let Some(row) = taken {
            return Ok(Lease {
                owner: owner.to_string(),
                epoch: row.int("lease_epoch")?,
                expires_at: until,
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
        epoch: i64,
        ttl: Duration,
    ) -> Result<Lease> {
        let until = expiry(now_micros(), ttl);
        let renewed = Sql::<D>::new("UPDATE sessions SET lease_expires_at = ")
            .bind(until)
            .push(" WHERE id = ")
            .bind(session_id)
            .push(" AND lease_owner = ")
            .bind(owner)
            .push(" AND lease_epoch = ")
            .bind(epoch)
            .execute(self.on_write())
            .await?;
        if renewed == 1 {
            return Ok(Lease {
                owner: owner.to_string(),
                epoch,
                expires_at: until,
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
                current: row.int("lease_epoch")?,
            }),
            None => Err(Error::SessionNotFound(session_id)),
        }
    }

    pub(super) async fn release(&self, session_id: Uuid, owner: &str, epoch: i64) -> Result<()> {
        Sql::<D>::new("UPDATE sessions SET lease_owner = NULL, lease_expires_at = ")
            .bind(DateTime::<Utc>::UNIX_EPOCH)
            .push(" WHERE id = ")
            .bind(session_id)
            .push(" AND lease_owner = ")
            .bind(owner)
            .push(" AND lease_epoch = ")
            .bind(epoch)
            .execute(self.on_write())
            .await?;
        Ok(())
    }
}

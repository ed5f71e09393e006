//! Strict budgets shared by the nodes of a cluster (docs/cluster.md): a key's spending in its
//! window is one row whose lock serialises the key's reservations on every node; a reservation
//! is a row naming its node, and a node that is no longer alive (or started again since) has
//! its reservations booked as spent — the most those calls could have cost — so the budget is
//! never overspent and never held for good.

use std::time::Duration;

use uuid::Uuid;

use super::dialect::{Columns, Dialect, On, Sql};
use super::SqlStore;
use crate::{BudgetDecision, BudgetRequest, Result};

/// A tiny tolerance, so that ten reservations of a tenth fit a budget of one.
const TOLERANCE: f64 = 1e-9;

impl<D: Dialect> SqlStore<D> {
    pub(super) async fn reserve(&self, request: &BudgetRequest) -> Result<BudgetDecision> {
        let mut tx = self.db.writer().begin().await?;
        // The key's row, its window started again when it ran out; the upsert locks the row
        // (PostgreSQL) or holds the one writer (SQLite) until the transaction ends.
        let mut upsert =
            Sql::<D>::new("INSERT INTO budget_spending (key, window_start, spent) VALUES (");
        upsert.bind(request.key.as_str()).push(", ");
        self.push_ago(&mut upsert, Duration::ZERO);
        upsert.push(
            ", 0.0) ON CONFLICT (key) DO UPDATE SET spent = CASE WHEN \
             budget_spending.window_start <= ",
        );
        self.push_ago(&mut upsert, request.window);
        upsert.push(
            " THEN 0.0 ELSE budget_spending.spent END, window_start = CASE WHEN \
             budget_spending.window_start <= ",
        );
        self.push_ago(&mut upsert, request.window);
        upsert.push(
            " THEN excluded.window_start ELSE budget_spending.window_start END \
             RETURNING window_start, spent",
        );
        let row = upsert
            .fetch_optional(On::Tx(&mut tx))
            .await?
            .ok_or_else(|| crate::Error::Corrupt("the budget upsert returned no row".into()))?;
        let window_start = row.time("window_start")?;
        let mut spent = row.real("spent")?;

        // Reservations of nodes that died or started again: their calls may have billed in full.
        let mut orphaned = Sql::<D>::new("DELETE FROM budget_reservations WHERE key = ");
        orphaned.bind(request.key.as_str());
        match request.node_ttl {
            Some(ttl) => {
                orphaned.push(
                    " AND NOT EXISTS (SELECT 1 FROM cluster_nodes n WHERE \
                     n.node_id = budget_reservations.node_id AND n.started_at <= \
                     budget_reservations.created_at AND n.heartbeat_at >= ",
                );
                self.push_ago(&mut orphaned, ttl);
                orphaned.push(")");
            }
            // A node alone: its node id is new each run, so any other is an earlier run's.
            None => {
                orphaned
                    .push(" AND node_id <> ")
                    .bind(request.node_id.as_str());
            }
        }
        orphaned.push(" RETURNING amount");
        let booked: f64 = orphaned
            .fetch_all(On::Tx(&mut tx))
            .await?
            .iter()
            .map(|row| row.real("amount"))
            .sum::<Result<f64>>()?;
        if booked > 0.0 {
            Sql::<D>::new("UPDATE budget_spending SET spent = spent + ")
                .bind(booked)
                .push(" WHERE key = ")
                .bind(request.key.as_str())
                .execute(On::Tx(&mut tx))
                .await?;
            spent += booked;
        }

        let row = Sql::<D>::new(
            "SELECT COALESCE(SUM(amount), 0.0) AS reserved FROM budget_reservations WHERE key = ",
        )
        .bind(request.key.as_str())
        .fetch_optional(On::Tx(&mut tx))
        .await?;
        let reserved = match row {
            Some(row) => row.real("reserved")?,
            None => 0.0,
        };
        if spent + reserved + request.amount > request.budget * (1.0 + TOLERANCE) {
            tx.commit().await?; // keeps the window's start and the booked orphans
            return Ok(BudgetDecision::Refused {
                spent,
                reserved,
                window_start,
            });
        }
        let id = Uuid::new_v4();
        let mut insert = Sql::<D>::new(
            "INSERT INTO budget_reservations (id, key, node_id, amount, created_at) VALUES (",
        );
        insert
            .bind(id)
            .push(", ")
            .bind(request.key.as_str())
            .push(", ")
            .bind(request.node_id.as_str())
            .push(", ")
            .bind(request.amount)
            .push(", ");
        self.push_ago(&mut insert, Duration::ZERO);
        insert.push(")");
        insert.execute(On::Tx(&mut tx)).await?;
        tx.commit().await?;
        Ok(BudgetDecision::Reserved(id))
    }

    /// Marks `key`'s window alerted once it spent `threshold` (see `Budgets::alert_budget`).
    pub(super) async fn alert(
        &self,
        key: &str,
        threshold: f64,
    ) -> Result<Option<(f64, chrono::DateTime<chrono::Utc>)>> {
        let row =
            Sql::<D>::new("UPDATE budget_spending SET alerted_window = window_start WHERE key = ")
                .bind(key)
                .push(" AND spent >= ")
                .bind(threshold - TOLERANCE)
                .push(
                    " AND (alerted_window IS NULL OR alerted_window <> window_start) \
                 RETURNING spent, window_start",
                )
                .fetch_optional(self.on_write())
                .await?;
        row.map(|row| Ok((row.real("spent")?, row.time("window_start")?)))
            .transpose()
    }

    /// Each of `keys`' spending in its current window, and the window's start.
    pub(super) async fn spending(
        &self,
        keys: &[String],
    ) -> Result<Vec<(String, f64, chrono::DateTime<chrono::Utc>)>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let rows =
            Sql::<D>::new("SELECT key, spent, window_start FROM budget_spending WHERE key IN ")
                .list(keys)
                .fetch_all(self.on_read())
                .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.text("key")?,
                    row.real("spent")?,
                    row.time("window_start")?,
                ))
            })
            .collect()
    }

    pub(super) async fn settle(&self, reservation: Uuid, cost: f64) -> Result<bool> {
        let mut tx = self.db.writer().begin().await?;
        let row = Sql::<D>::new("DELETE FROM budget_reservations WHERE id = ")
            .bind(reservation)
            .push(" RETURNING key")
            .fetch_optional(On::Tx(&mut tx))
            .await?;
        // Gone: another node booked it as spent in full when this node looked dead.
        let Some(row) = row else {
            return Ok(false);
        };
        let key = row.text("key")?;
        Sql::<D>::new("UPDATE budget_spending SET spent = spent + ")
            .bind(cost.max(0.0))
            .push(" WHERE key = ")
            .bind(key)
            .execute(On::Tx(&mut tx))
            .await?;
        tx.commit().await?;
        Ok(true)
    }
}

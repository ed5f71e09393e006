//! Throwaway PostgreSQL databases for benchmarks and tests: created with a random name on the
//! server an admin URL points at, dropped when done.

use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

use crate::{Error, Result};

/// A database that exists until [`ScratchDatabase::drop_database`] is awaited.
#[derive(Debug)]
pub struct ScratchDatabase {
    admin: PgConnectOptions,
    name: String,
    url: String,
}

impl ScratchDatabase {
    /// Creates `{prefix}_{random}` on the server of `admin_url`. `prefix` must be lowercase ASCII
    /// letters, digits and underscores: database names cannot be bound as parameters, so this
    /// is the only text that reaches the statement besides hex digits.
    pub async fn create(admin_url: &str, prefix: &str) -> Result<Self> {
        if prefix.is_empty()
            || !prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(Error::InvalidInput(format!(
                "bad database name prefix `{prefix}`"
            )));
        }
        let admin = PgConnectOptions::from_str(admin_url)
            .map_err(|e| Error::Config(format!("malformed PostgreSQL URL: {e}")))?;
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        let mut conn = admin.connect().await.map_err(|e| {
            Error::Config(format!(
                "cannot connect to PostgreSQL at {}: {e}",
                crate::redact_url(admin_url)
            ))
        })?;
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        let mut url = url::Url::parse(admin_url)
            .map_err(|e| Error::Config(format!("malformed PostgreSQL URL: {e}")))?;
        url.set_path(&format!("/{name}"));
        Ok(ScratchDatabase {
            admin,
            name,
            url: url.to_string(),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops the database, closing any connection still open to it.
    pub async fn drop_database(self) -> Result<()> {
        let mut conn = self.admin.connect().await?;
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.name
        ))
        .execute(&mut conn)
        .await?;
        conn.close().await?;
        Ok(())
    }
}

/// The `application_name` this process's connections carry: `stead/{pid}`, so that
/// `pg_stat_activity` tells Stead processes apart.
pub fn application_name() -> String {
    format!("stead/{}", std::process::id())
}

/// Waits until no other process has a connection open to the database at `url` (PostgreSQL;
/// a no-op for SQLite). A killed client's server-side backend can still be finishing — even
/// committing — its last transaction: crash tests wait for it to be gone before they read
/// what survived.
pub async fn wait_for_other_connections(
    url: &crate::DatabaseUrl,
    timeout: std::time::Duration,
) -> Result<()> {
    let crate::DatabaseUrl::Postgres(url) = url else {
        return Ok(());
    };
    let mut conn = PgConnectOptions::from_str(url)
        .map_err(|e| Error::Config(format!("malformed PostgreSQL URL: {e}")))?
        .connect()
        .await?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let others: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND application_name IS DISTINCT FROM $1",
        )
        .bind(application_name())
        .fetch_one(&mut conn)
        .await?;
        if others == 0 {
            conn.close().await?;
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            let who: Vec<(Option<String>, Option<String>, Option<String>)> = sqlx::query_as(
                "SELECT application_name, state, left(query, 80) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() \
                 AND application_name IS DISTINCT FROM $1",
            )
            .bind(application_name())
            .fetch_all(&mut conn)
            .await?;
            return Err(Error::InvalidInput(format!(
                "{others} connection(s) still open: {who:?}"
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

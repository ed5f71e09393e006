//! The storage layer's integration tests, one binary, each on SQLite and PostgreSQL: the
//! journal contract (`journal`), the request log (`request_log`), the queries neither reaches
//! (`store_queries`), and crash durability of a child process killed with SIGKILL
//! (`durability`). Test databases come from `stead-testkit` (`db`, `both_backends!`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod artifacts;
mod audit;
mod durability;
mod evals;
mod journal;
mod request_log;
mod schedules;
mod store_queries;
mod tenancy;
mod upgrade;

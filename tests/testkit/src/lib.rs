//! Stead's test kit: the test doubles and harnesses that the integration tests of every crate
//! share, so that each exists once. It owns:
//!
//! - [`upstream`]: a fake OpenAI-compatible upstream (scripted replies or a closure);
//! - [`webhook`]: a recording double of the user's HTTP endpoint (webhook tools, collectors);
//! - [`model`] (feature `actors`): a scripted `ModelClient` double for session actors;
//! - [`client`]: what tests do through the public API (`Api`: sessions, messages, journals,
//!   WebSockets), for both harnesses below;
//! - [`stead`]: the real `stead` binary as a process;
//! - [`app`] (feature `http`): the HTTP edge in this process (`oneshot` requests, a loopback
//!   port for WebSockets) over a real store and session actors, for handler tests;
//! - [`ops`]: the `ops` scenario (upstream, webhook and `stead.toml`) of the end-to-end tests;
//! - [`db`] (feature `db`): fresh databases on SQLite and PostgreSQL, and
//!   [`both_backends!`] to run a test on each;
//! - [`delegation`] (feature `actors`): the sub-agent scenario (a coordinator, two child
//!   agents, their scripted model);
//! - [`crash`]: the crash harness (a child re-run of the test binary, killed with SIGKILL);
//! - [`external`]: running an external client (Python, Schemathesis, a browser) with a time
//!   limit, its output shown on failure.
//!
//! Nothing here is used by Stead itself; the crate is not published.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "http")]
pub mod app;
pub mod arbitrary;
pub mod client;
pub mod crash;
#[cfg(feature = "db")]
pub mod db;
#[cfg(feature = "actors")]
pub mod delegation;
pub mod external;
#[cfg(feature = "actors")]
pub mod model;
pub mod ops;
pub mod s3;
pub mod stead;
pub mod upstream;
mod upstream_anthropic;
pub mod webhook;

//! `stead-http`'s handler behaviour, in process (`stead_testkit::app`): requests through the
//! real router with `tower::ServiceExt::oneshot`, WebSockets on a loopback port of this
//! process, a real SQLite store and real session actors, the model a scripted double. The
//! binary is spawned only by the end-to-end tests (`tests/e2e`), where the process matters.
//!
//! - `edge`: Host/Origin checks of the open server, security headers, the header-read
//!   timeout and the connection and per-session WebSocket caps;
//! - `input`: bad input and authentication get their documented errors and change nothing;
//! - `metrics`: `/metrics` stays bounded whatever methods clients invent;
//! - `sessions`: a session's life over REST and WebSocket.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod delegation;
mod edge;
mod evals;
mod input;
mod memory;
mod metrics;
mod schedule_tool;
mod schedules;
mod sessions;

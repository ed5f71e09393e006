//! The session actors' integration tests, one binary: the agent loop as pure decisions
//! (`decisions`), the session actor on a real store (`session_actor`), the built-in tools
//! (`tools`), and crash recovery of a child process killed with SIGKILL (`crash`). The doubles
//! (model, webhook endpoint) come from `stead-testkit`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod crash;
mod decisions;
mod delegation_crash;
mod session_actor;
mod tools;

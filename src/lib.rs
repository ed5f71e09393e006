//! The root package `stead`: the one binary and its wiring. It owns the command line (`cli`),
//! the wiring of the crates into a running server (`serve`), a node's cluster membership,
//! takeover sweep and request forwarding (`cluster`), journal retention (`retention`), tracing
//! and logs (`telemetry`), and the operator commands that work on the store directly
//! (`session` and `replay` in `replay_cli`, `knowledge` in `knowledge_cli`). Everything else is
//! a crate it wires: `stead-config` (configuration), `stead-agents` (agents, their tools, the
//! local engines and the model router they call), `stead-actors` (sessions),
//! `stead-persistence` (journal), `stead-router` (AI gateway), `stead-inference` (local
//! engine), `stead-http` (HTTP edge) and `stead-bench` (`stead bench …`, `stead eval …`).

pub mod cli;
pub mod cluster;
pub mod eval_cli;
pub mod knowledge_cli;
pub mod replay_cli;
pub mod retention;
pub mod serve;
pub mod telemetry;

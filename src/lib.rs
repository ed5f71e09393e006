//! The root package `stead`: the one binary's library. It owns the command line, the layered
//! configuration (`config`), and the wiring of the crates into a running server (`serve`):
//! agents built from configuration (`agents`), the model router's providers, request log and
//! the sessions' `ModelClient` over it (`model_router`), journal retention (`retention`), a
//! node's cluster membership, takeover sweep and request forwarding (`cluster`), knowledge
//! collections and the `knowledge` tool (`knowledge`), plus
//! the operator commands (`setup`, `migrate`, `session` and `replay` in `replay_cli`, and the
//! benchmarks of `stead bench …` in `bench`, the model evaluation of `stead eval` in `eval`).
//! Behaviour lives in the crates it wires:
//! `stead-persistence` (journal), `stead-actors` (sessions), `stead-inference` (local engine
//! and model router) and `stead-gateway` (HTTP).

pub mod agents;
pub mod bench;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod eval;
pub mod knowledge;
pub mod mcp;
pub mod model_router;
pub mod redact;
pub mod replay_cli;
pub mod retention;
pub mod serve;
pub mod telemetry;

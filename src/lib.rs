//! The root package `stead`: the one binary's library. It owns the command line, the layered
//! configuration, and the wiring of the crates into a running server (`serve`): agents built
//! from configuration (`agents`), the local model behind the sessions' `ModelClient`
//! (`local_model`), plus the operator commands (`setup`, `migrate`, `bench`). Behaviour lives in
//! the crates it wires: `stead-persistence` (journal), `stead-actors` (sessions),
//! `stead-inference` (local engine) and `stead-gateway` (HTTP).

pub mod agents;
pub mod bench;
pub mod bench_inference;
pub mod bench_sessions;
pub mod bench_ws;
pub mod cli;
pub mod config;
pub mod local_model;
pub mod openai_model;
pub mod routing;
pub mod serve;

//! The root package `stead`: the one binary's library. It owns the command line, the layered
//! configuration, and the wiring of the crates into a running server (`serve`), plus the
//! operator commands (`migrate`, `bench`). Behaviour lives in the crates it wires:
//! `stead-persistence` (journal), `stead-gateway` (HTTP), and later `stead-actors` and
//! `stead-inference`.

pub mod bench;
pub mod bench_inference;
pub mod bench_sessions;
pub mod cli;
pub mod config;
pub mod local_model;
pub mod serve;

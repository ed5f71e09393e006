//! Vector search for knowledge collections (docs/knowledge.md, "Search"): the dot product of two
//! embeddings with the widest SIMD the CPU has (AVX-512, AVX2 + FMA, or portable code, chosen
//! once at run time), exact top-k over one flat array of embeddings ([`Flat`]), and an HNSW
//! graph for approximate search built with USearch, a maintained ANN library ([`Graph`]).
//! This crate is compiled optimized even in debug builds (the workspace's `Cargo.toml`): a
//! search scans every embedding, and unoptimized SIMD intrinsics are slower than plain loops.

mod dot;
mod flat;
mod graph;
pub mod synthetic;

pub use dot::{dot, dot_i8, kernel};
pub use flat::{best, Flat, Ranked, RowFilter};
pub use graph::{Graph, GraphError, GraphOptions};

//! The model vocabulary of Stead: what a model call is made of — chat messages, tool specs,
//! usage and finish reasons ([`chat`]) — and what every source of completions implements — the
//! [`provider::Provider`] trait with its call, reply, stream chunk and error types — and what
//! the request log keeps of each call ([`log`]); and the ids the other crates pass around
//! ([`ids`]: a tool call's id, a lease's epoch, who decided an approval). The model
//! router (`stead-router`) routes over providers; the local engine (`stead-inference`) is one.
//! Both depend on this crate and neither on the other (`tests/e2e/architecture.rs`).

pub mod chat;
pub mod ids;
pub mod log;
pub mod provider;

pub use ids::{CallId, Decider, Epoch};
pub use provider::{
    Chunk, EmbedReply, FailureKind, Params, Provider, ProviderCall, ProviderError, ProviderMetric,
    ProviderReply, RouterRequest,
};

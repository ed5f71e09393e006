//! `stead-inference` owns local inference: the pooled ONNX Runtime engine (ort), the model
//! directory it loads, tokenization and incremental detokenization, the model's own chat
//! template and the prompt adapters for small models (`adapt`, `small_talk`), sampling, continuous batching, and tool calls constrained to their JSON schemas
//! (llguidance); sentence embeddings with an encoder model (`embedding`); speech to text with
//! Whisper (`speech`: audio decoding, the log-mel input, the encoder-decoder); and the `onnx`
//! provider that puts a pool behind the model router: it implements `stead-model`'s
//! `Provider` and speaks its chat vocabulary (messages, tools, usage), and does not link the
//! router. It knows nothing of sessions, storage or HTTP, and nothing of routing: retries,
//! fallback, cache and limits belong to the router.

pub mod adapt;
pub mod batching;
pub mod constrained;
pub mod embedding;
pub mod embedding_pool;
mod embedding_setup;
pub mod engine;
mod error;
pub mod model_dir;
pub mod pool;
pub mod prefix_cache;
pub mod provider;
pub mod sampling;
pub mod setup;
pub mod small_talk;
pub mod speech;
mod speech_setup;
pub mod template;
pub mod text;
mod types;

pub use error::{Error, Result};
pub use speech_setup::CT2_READER;
pub use types::*;

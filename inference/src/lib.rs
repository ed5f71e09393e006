//! `stead-inference` owns local inference: the pooled ONNX Runtime engine (ort), the model
//! directory it loads, tokenization and incremental detokenization, the model's own chat
//! template, sampling, and tool calls constrained to their JSON schemas (llguidance); and the
//! model router over the local engine and remote OpenAI-compatible providers (retries,
//! fallback, cooldowns, cache, limits, budgets, the request log's records and histograms).
//! It knows nothing of sessions or storage: the request log goes to a sink trait.

pub mod constrained;
pub mod engine;
mod error;
pub mod model_dir;
pub mod pool;
pub mod router;
pub mod sampling;
pub mod scheduler;
pub mod setup;
pub mod template;
pub mod text;
mod types;

pub use error::{Error, Result};
pub use types::*;

//! `stead-inference` owns local inference: the pooled ONNX Runtime engine (ort), the model
//! directory it loads, tokenization and incremental detokenization, the model's own chat
//! template, sampling, and tool calls constrained to their JSON schemas (llguidance). Later it
//! also owns the model router over the local engine and remote OpenAI-compatible providers.
//! It knows nothing of sessions or storage.

pub mod constrained;
pub mod engine;
mod error;
pub mod model_dir;
pub mod pool;
pub mod sampling;
pub mod scheduler;
pub mod setup;
pub mod template;
pub mod text;
mod types;

pub use error::{Error, Result};
pub use types::*;

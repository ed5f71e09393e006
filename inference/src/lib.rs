//! `stead-inference` will own local inference (the pooled ONNX Runtime engine, tokenizer, chat
//! templates, sampling and constrained tool-call decoding) and the model router over the local
//! engine and remote OpenAI-compatible providers. It knows nothing of sessions or storage: the
//! router's request log goes through a sink trait the binary connects to persistence.
//!
//! Nothing lives here yet: the foundation issue only builds the journal and the binary.

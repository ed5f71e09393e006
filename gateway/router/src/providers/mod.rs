//! The remote providers the router calls: any OpenAI-compatible API ([`openai`]) and
//! Anthropic's Messages API ([`anthropic`]). Each implements `stead_model::Provider`; the local
//! engine is the third kind and lives in `stead-inference`.

pub mod anthropic;
pub mod openai;

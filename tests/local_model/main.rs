//! End-to-end tests on the real local models (the default Qwen2.5-Coder-0.5B-Instruct and
//! SmolLM2-135M-Instruct, prepared by `stead setup` into `$STEAD_DATA_DIR`; scripts/test.sh does
//! that first), one binary:
//!
//! - `agent`: a session actor through the `ModelClient` the binary wires (SmolLM2);
//! - `converter`: both conversions against llama.cpp, and an architecture it refuses;
//! - `evals`: `stead eval agent`'s first cases through the evaluation engine (the default model);
//! - `gateway`: a streamed chat over the WebSocket of `stead serve` (the default model);
//! - `knowledge`: the Knowledge page in a real browser, queries and the `knowledge` tool on the
//!   real embedding and chat models;
//! - `openai_client`: the official `openai` Python client against the OpenAI-compatible API
//!   (chat and embeddings);
//! - `speech`: Whisper transcribing labelled recordings in each container, and silence;
//! - `web_demo`: the demo flow (remember, forget after approval) in a real browser.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent;
mod converter;
mod evals;
mod gateway;
mod knowledge;
mod openai_client;
mod speech;
mod vendor_clients;
mod web_demo;

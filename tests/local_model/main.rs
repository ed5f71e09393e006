//! End-to-end tests on the real local model (SmolLM2-135M-Instruct, prepared by `stead setup`
//! into `$STEAD_DATA_DIR`; scripts/test.sh does that first), one binary:
//!
//! - `agent`: a session actor through the `ModelClient` the binary wires;
//! - `gateway`: a streamed chat over the WebSocket of `stead serve`;
//! - `openai_client`: the official `openai` Python client against the OpenAI-compatible API.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent;
mod gateway;
mod openai_client;

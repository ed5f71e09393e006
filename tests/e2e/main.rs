//! End-to-end tests of the `stead` binary through its public interfaces, one binary (one module
//! per concern; the models are test doubles from `stead-testkit`, so nothing here needs the
//! local model — `tests/local_model/` has the tests that do):
//!
//! - `architecture`: the maps in the README and docs/architecture.md, the dependency rule, file
//!   sizes;
//! - `chaos`: the short run of `stead bench chaos` (SIGKILLs under a mixed workload);
//! - `cli`: the command line, layered configuration, bad configuration;
//! - `serve`, `serve_crash`: the server process (health, signals) and SIGKILL recovery;
//! - `schedules`: schedules across a SIGKILL, and two servers on one PostgreSQL;
//! - `gateway`: WebSocket and REST end to end (bad input and auth: stead-http's own tests);
//! - `gateway_router`: the model router through `/v1/chat/completions` and its log;
//! - `knowledge`, `knowledge_checks`: knowledge collections over REST, `/v1/embeddings`, the
//!   `knowledge` tool; the evaluation's labels and the query benchmark's short run;
//! - `mcp`: MCP servers as agent tools (npm and Python servers) and Stead's own `/mcp`;
//! - `replay`: `stead session …` and `stead replay …`;
//! - `telemetry`: OTLP spans;
//! - `tenancy`: projects, virtual keys and their roles, and the isolation sweep;
//! - `schemathesis`, `web_ui`: external clients (Schemathesis, a real browser).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod architecture;
mod artifacts;
mod artifacts_s3;
mod chaos;
mod cli;
mod clients;
mod cluster;
mod context;
mod delegation_budget;
mod evals;
mod gateway;
mod gateway_apis;
mod gateway_router;
mod guardrails;
mod guardrails_judge;
mod guardrails_tools;
mod knowledge;
mod knowledge_checks;
mod mcp;
mod multimodal;
mod replay;
mod schedules;
mod schemathesis;
mod serve;
mod serve_crash;
mod speech;
mod sso;
mod telemetry;
mod tenancy;
mod web_ui;
mod web_ui_budget;
mod web_ui_delegation;
mod web_ui_evals;
mod web_ui_sso;

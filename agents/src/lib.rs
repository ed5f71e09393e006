//! The crate `stead-agents`: what a configured agent is made of, built from `stead-config`
//! for the server, the operator commands and the benches alike. It owns the agents themselves
//! (`agent`: loop rules, approval policy, tools of their kinds), the tools that are more than
//! a function — knowledge collections with their index and REST service (`knowledge`), MCP
//! servers as tool sources and Stead's own `/mcp` endpoint (`mcp`) — the local engines a
//! configuration names (`engines`) and the model router the sessions call through
//! (`models`: providers, request log, the sessions' `ModelClient`), the files tools return kept
//! as artifacts (`tool_artifacts`) and the speech service behind `/v1/audio/transcriptions`
//! (`speech`). The built-in tools
//! themselves (calculator, clock, memory, webhooks, schedules, sub-agents) live with the
//! session actor in `stead-actors`; this crate chooses and configures them.

pub mod agent;
pub mod budget_alerts;
pub mod engines;
pub mod knowledge;
pub mod mcp;
pub mod models;
pub mod speech;
pub mod tool_artifacts;

pub use agent::{build, build_agent, config_hash, rules, webhook_client};

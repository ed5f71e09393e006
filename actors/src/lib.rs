//! `stead-actors` will own the session actor (the "durable object"), its supervisor and registry,
//! the agent loop written as pure decisions over the journal, the tools and the approval policy.
//! It talks to storage and models only through small traits, so it never names sqlx or ort types.
//!
//! Nothing lives here yet: the foundation issue only builds the journal underneath it.

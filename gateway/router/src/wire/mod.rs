//! OpenAI's chat completions wire format, both ways: requests that callers send to the router
//! (parsed into a [`RouterRequest`]) and that the router sends to OpenAI-compatible providers;
//! answers as whole JSON bodies and as server-sent-event chunks, and the fold of a provider's
//! event stream back into one answer ([`StreamAccumulator`]). Pure functions: tested without a
//! server.

mod body;
mod fold;
mod request;
#[cfg(test)]
mod tests;
pub mod types;

pub use self::body::*;
pub use self::fold::*;
pub use self::request::*;
pub use self::types::{finish_reason_str, Delta};

/// The start of a text, for error messages.
pub fn excerpt(text: &str) -> String {
    text.trim().chars().take(200).collect()
}

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

/// A request or an answer in a wire format that cannot be read: what is wrong, naming the
/// field (`messages[2]: \`role\` must be …`). Requests answer it as a 400; answers fail their
/// attempt with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(String);

impl WireError {
    /// The same problem, inside `field` (`messages[2]`, `tools[0]`).
    pub fn within(self, field: impl std::fmt::Display) -> WireError {
        WireError(format!("{field}: {}", self.0))
    }

    pub fn message(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WireError {}

impl From<String> for WireError {
    fn from(message: String) -> Self {
        WireError(message)
    }
}

impl From<&str> for WireError {
    fn from(message: &str) -> Self {
        WireError(message.to_string())
    }
}

/// The start of a text, for error messages.
pub fn excerpt(text: &str) -> String {
    text.trim().chars().take(200).collect()
}

//! OpenAI's chat completions format, both ways: requests that callers send to the router
//! (parsed into a [`RouterRequest`]) and that the router sends to OpenAI-compatible providers;
//! answers as whole JSON bodies and as server-sent-event chunks, and the assembly of a provider's
//! event stream into one answer ([`StreamAccumulator`]). Pure functions: tested without a
//! server.

mod assemble;
mod body;
mod request;
#[cfg(test)]
mod tests;
pub mod types;

pub use self::assemble::*;
pub use self::body::*;
pub use self::request::*;
pub use self::types::{finish_reason_str, Delta};

/// A request or an answer in a provider's format that cannot be read: what is wrong, naming the
/// field (`messages[2]: \`role\` must be …`). Requests answer it as a 400; answers fail their
/// attempt with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError(String);

impl FormatError {
    /// The same problem, inside `field` (`messages[2]`, `tools[0]`).
    pub fn within(self, field: impl std::fmt::Display) -> FormatError {
        FormatError(format!("{field}: {}", self.0))
    }

    pub fn message(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormatError {}

impl From<String> for FormatError {
    fn from(message: String) -> Self {
        FormatError(message)
    }
}

impl From<&str> for FormatError {
    fn from(message: &str) -> Self {
        FormatError(message.to_string())
    }
}

/// The start of a text, for error messages.
pub fn excerpt(text: &str) -> String {
    text.trim().chars().take(200).collect()
}

//! Reading a provider's answer with a bound on its size (docs/security.md, "Providers"): a
//! hostile or broken upstream cannot make the gateway buffer more than these many bytes for
//! one call, streamed or not.

use super::provider::{FailureKind, ProviderError};

/// The most bytes of one chat answer by default, whole or streamed (all events together); a
/// provider's `max_answer_mib` changes it. A completion of the largest `max_tokens` any
/// provider offers stays far below it.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// The most bytes of one embeddings answer by default: 8 times a chat answer's (2,048 inputs
/// of 3,072 floats written as JSON text fit in it).
pub const MAX_EMBED_ANSWER_BYTES: usize = 8 * MAX_ANSWER_BYTES;

/// The most bytes of an error answer read for its message; the rest is not read.
pub const MAX_ERROR_BYTES: usize = 64 << 10;

/// Bytes received so far against a limit.
pub(crate) struct AnswerLimit<'a> {
    provider: &'a str,
    limit: usize,
    seen: usize,
}

impl<'a> AnswerLimit<'a> {
    pub(crate) fn new(provider: &'a str, limit: usize) -> Self {
        AnswerLimit {
            provider,
            limit,
            seen: 0,
        }
    }

    /// Counts `n` more bytes; past the limit the call fails (a `stream` failure: the route
    /// may try its next target).
    pub(crate) fn take(&mut self, n: usize) -> Result<(), ProviderError> {
        self.seen = self.seen.saturating_add(n);
        if self.seen > self.limit {
            return Err(self.too_large());
        }
        Ok(())
    }

    fn too_large(&self) -> ProviderError {
        ProviderError::new(
            FailureKind::Stream,
            format!(
                "{} sent an answer over {} MiB, the most one call may be",
                self.provider,
                self.limit >> 20
            ),
        )
    }
}

/// The whole body of `response`, failing as soon as it is known to be over `limit` (its
/// `Content-Length`, or the bytes read so far) rather than after buffering it.
pub(crate) async fn read_limited(
    provider: &str,
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, ProviderError> {
    let mut counted = AnswerLimit::new(provider, limit);
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(counted.too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| crate::providers::openai::transport_error(provider, &e, true))?
    {
        counted.take(chunk.len())?;
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// At most the first `limit` bytes of an error answer's body (read errors end it early: the
/// status is what matters).
pub(crate) async fn read_prefix(mut response: reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = limit - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= limit {
            break;
        }
    }
    body
}

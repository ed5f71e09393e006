//! The `openai` provider: any OpenAI-compatible chat completions (and embeddings) API (OpenAI itself, vLLM,
//! llama.cpp's server, Ollama, hosted gateways), streamed over server-sent events or not.
//! Errors carry the HTTP status and `Retry-After`, so the router's retry rules can read them.

use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::Value;

use crate::answer::{read_limited, AnswerLimit, MAX_ANSWER_BYTES};
use crate::chat::Usage;
use crate::completions::{self, excerpt, Assembled, StreamAccumulator};
use crate::provider::{
    AudioInput, Chunk, EmbedReply, FailureKind, Provider, ProviderCall, ProviderError,
    ProviderReply, TranscribeReply,
};

/// A provider behind an OpenAI-compatible API.
pub struct OpenAiProvider {
    name: String,
    /// `{base_url}/chat/completions`, parsed once.
    url: reqwest::Url,
    /// `{base_url}/embeddings`.
    embeddings_url: reqwest::Url,
    transcriptions_url: reqwest::Url,
    api_key: Option<String>,
    client: reqwest::Client,
    /// The most bytes of one chat answer ([`MAX_ANSWER_BYTES`] unless set); embeddings
    /// answers may be 8 times as large.
    answer_limit: usize,
}

impl OpenAiProvider {
    /// `base_url` is the API root that `/chat/completions` is appended to, e.g.
    /// `http://127.0.0.1:9000/v1`; `api_key` is sent as `Authorization: Bearer`.
    ///
    /// # Panics
    /// When `base_url` is not a URL (configuration validates it first).
    pub fn new(
        name: impl Into<String>,
        base_url: &str,
        api_key: Option<String>,
        client: reqwest::Client,
    ) -> Self {
        let base = base_url.trim_end_matches('/');
        // Documented under `# Panics`: the configuration checks `base_url` before this runs.
        #[allow(clippy::expect_used)]
        let parse = |path: &str| {
            reqwest::Url::parse(&format!("{base}{path}")).expect("a validated base_url")
        };
        OpenAiProvider {
            name: name.into(),
            url: parse("/chat/completions"),
            embeddings_url: parse("/embeddings"),
            transcriptions_url: parse("/audio/transcriptions"),
            api_key,
            client,
            answer_limit: MAX_ANSWER_BYTES,
        }
    }

    /// Sends `request` with the provider's key; a transport failure or an error status is
    /// the attempt's error.
    async fn send(
        &self,
        mut request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ProviderError> {
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| self.transport_error(&e, false))?;
        if !response.status().is_success() {
            return Err(self.status_error(response).await);
        }
        Ok(response)
    }

    /// An answer's JSON, read up to `limit` bytes.
    async fn read_json(
        &self,
        response: reqwest::Response,
        limit: usize,
    ) -> Result<Value, ProviderError> {
        let bytes = read_limited(&self.name, response, limit).await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            ProviderError::new(
                FailureKind::Stream,
                format!("{} sent an unreadable answer: {e}", self.name),
            )
        })
    }

    /// The same provider with another bound on one answer's bytes (`max_answer_mib`).
    pub fn with_answer_limit(mut self, bytes: usize) -> Self {
        self.answer_limit = bytes;
        self
    }

    fn transport_error(&self, error: &reqwest::Error, streaming: bool) -> ProviderError {
        transport_error(&self.name, error, streaming)
    }

    async fn status_error(&self, response: reqwest::Response) -> ProviderError {
        status_error(&self.name, response).await
    }
}

/// A failed request or broken stream, with the causes reqwest keeps behind its message. The
/// provider's URL is left out (named by the provider instead): the message reaches the request
/// log, `/v1/chat/completions` callers and the sessions' `model_call_failed`, and the URL may
/// name internal hosts or carry credentials.
pub(crate) fn transport_error(
    name: &str,
    error: &reqwest::Error,
    streaming: bool,
) -> ProviderError {
    let mut causes = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        causes.push_str(": ");
        causes.push_str(&cause.to_string());
        source = cause.source();
    }
    if let Some(url) = error.url() {
        causes = causes.replace(&format!(" for url ({url})"), "");
        causes = causes.replace(url.as_str(), "<the provider's URL>");
    }
    let (kind, message) = if error.is_timeout() {
        (FailureKind::Timeout, format!("{name} timed out: {causes}"))
    } else if error.is_connect() {
        (
            FailureKind::Connect,
            format!("could not connect to {name}: {causes}"),
        )
    } else if streaming {
        (
            FailureKind::Stream,
            format!("the stream from {name} broke: {causes}"),
        )
    } else {
        (
            FailureKind::Connect,
            format!("the call to {name} failed: {causes}"),
        )
    };
    ProviderError::new(kind, message)
}

/// An HTTP error answer, with the provider's own message (OpenAI's and Anthropic's envelopes
/// both keep it in `error.message`) and its `Retry-After`.
pub(crate) async fn status_error(name: &str, response: reqwest::Response) -> ProviderError {
    let status = response.status();
    let after = retry_after(response.headers());
    let body = crate::answer::read_prefix(response, crate::answer::MAX_ERROR_BYTES).await;
    let body = String::from_utf8_lossy(&body);
    let message = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(String::from))
        .unwrap_or_else(|| excerpt(&body));
    ProviderError::status(
        status.as_u16(),
        after,
        format!("{name} answered {status}: {message}"),
    )
    .quoting()
}

/// An OpenAI embeddings answer: `data[i].embedding` (floats) by `index`, and `usage`.
fn parse_embeddings(
    value: &Value,
    inputs: usize,
    asked: &str,
) -> Result<EmbedReply, completions::FormatError> {
    let data = value["data"]
        .as_array()
        .ok_or("the answer has no `data` array")?;
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; inputs];
    for (position, item) in data.iter().enumerate() {
        let index = item["index"].as_u64().map_or(position, |i| i as usize);
        let values = item["embedding"]
            .as_array()
            .ok_or("an embedding is not an array of numbers")?
            .iter()
            .map(|v| v.as_f64().map(|f| f as f32))
            .collect::<Option<Vec<f32>>>()
            .ok_or("an embedding holds something other than numbers")?;
        match vectors.get_mut(index) {
            Some(slot) => *slot = Some(values),
            None => return Err(format!("an embedding for input {index} of {inputs}").into()),
        }
    }
    let vectors = vectors
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("{} embeddings for {inputs} inputs", data.len()))?;
    Ok(EmbedReply {
        vectors,
        prompt_tokens: value["usage"]["prompt_tokens"].as_u64().unwrap_or(0) as usize,
        model: value["model"].as_str().unwrap_or(asked).to_string(),
    })
}

/// `Retry-After` as seconds (or an HTTP date, which is read as "now": retry after the backoff).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let seconds: f64 = value.trim().parse().ok()?;
    // A value too large for a Duration (a hostile or broken upstream) is "not soon": the
    // longest wait, which is over any `max_retry_after_secs`, so the route moves on.
    (seconds.is_finite() && seconds >= 0.0)
        .then(|| Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX))
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn system(&self) -> &str {
        "openai"
    }

    async fn embed(&self, model: &str, inputs: &[String]) -> Result<EmbedReply, ProviderError> {
        let body =
            serde_json::json!({ "model": model, "input": inputs, "encoding_format": "float" });
        let request = self.client.post(self.embeddings_url.clone()).json(&body);
        let response = self.send(request).await?;
        let value = self
            .read_json(response, self.answer_limit.saturating_mul(8))
            .await?;
        parse_embeddings(&value, inputs.len(), model).map_err(|e| {
            ProviderError::new(FailureKind::Stream, format!("{}: {e}", self.name)).quoting()
        })
    }

    async fn transcribe(
        &self,
        model: &str,
        audio: &AudioInput,
    ) -> Result<TranscribeReply, ProviderError> {
        let boundary = format!("stead-{}", uuid::Uuid::new_v4().simple());
        let mut fields = vec![("model", model), ("response_format", "verbose_json")];
        if let Some(language) = &audio.language {
            fields.push(("language", language));
        }
        let body = multipart_body(&boundary, &fields, audio);
        let request = self
            .client
            .post(self.transcriptions_url.clone())
            .header(
                reqwest::header::CONTENT_TYPE,
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body);
        let response = self.send(request).await?;
        let value = self.read_json(response, self.answer_limit).await?;
        let text = value["text"].as_str().ok_or_else(|| {
            ProviderError::new(
                FailureKind::Stream,
                format!("{} answered a transcription without `text`", self.name),
            )
        })?;
        Ok(TranscribeReply {
            text: text.to_string(),
            language: value["language"].as_str().map(str::to_string),
            duration: value["duration"].as_f64(),
        })
    }

    async fn chat(&self, call: ProviderCall<'_>) -> Result<ProviderReply, ProviderError> {
        let streaming = call.chunks.is_some();
        let body = completions::provider_body(
            call.model,
            call.request,
            call.max_tokens,
            call.continue_from,
            streaming,
        );
        let request = self.client.post(self.url.clone()).json(&body);
        let response = self.send(request).await?;
        let assembled = match call.chunks {
            None => {
                let value = self.read_json(response, self.answer_limit).await?;
                completions::parse_completion(&value).map_err(|e| {
                    ProviderError::new(FailureKind::Stream, format!("{}: {e}", self.name)).quoting()
                })?
            }
            Some(chunks) => {
                let mut body = std::pin::pin!(response.bytes_stream());
                let mut stream = StreamAccumulator::default();
                let mut received = AnswerLimit::new(&self.name, self.answer_limit);
                loop {
                    let (fed, ended) = match body.next().await {
                        Some(Ok(bytes)) => {
                            received.take(bytes.len())?;
                            (stream.feed(&bytes), false)
                        }
                        Some(Err(error)) => return Err(self.transport_error(&error, true)),
                        None => (stream.end(), true),
                    };
                    let fed = fed.map_err(|e| {
                        ProviderError::new(FailureKind::Stream, format!("{}: {e}", self.name))
                            .quoting()
                    })?;
                    for text in fed.text {
                        let _ = chunks.send(Chunk::Text(text));
                    }
                    for _ in 0..fed.tool_fragments {
                        let _ = chunks.send(Chunk::ToolCallFragment);
                    }
                    if ended || stream.is_done() {
                        break;
                    }
                }
                stream.finish().map_err(|e| {
                    ProviderError::new(FailureKind::Stream, format!("{}: {e}", self.name)).quoting()
                })?
            }
        };
        Ok(reply(assembled, call.model))
    }
}

fn reply(assembled: Assembled, asked: &str) -> ProviderReply {
    let usage = assembled.usage.unwrap_or(Usage {
        // Servers that report no usage: count the fragments as the completion's tokens.
        prompt_tokens: 0,
        completion_tokens: assembled.fragments as usize,
    });
    ProviderReply {
        text: assembled.text,
        tool_calls: assembled.tool_calls,
        finish_reason: assembled.finish_reason,
        usage,
        model: assembled.model.unwrap_or_else(|| asked.to_string()),
    }
}

/// A `multipart/form-data` body: the text `fields`, then the audio as `file`.
fn multipart_body(boundary: &str, fields: &[(&str, &str)], audio: &AudioInput) -> Vec<u8> {
    let mut body = Vec::with_capacity(audio.bytes.len() + 512);
    for (name, value) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .as_bytes(),
        );
    }
    // The name is the client's: quotes and line breaks in it would break the form.
    let file_name: String = audio
        .file_name
        .chars()
        .filter(|c| !matches!(c, '"' | '\r' | '\n' | '\\'))
        .collect();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{}\"\r\nContent-Type: {}\r\n\r\n",
            if file_name.is_empty() { "audio" } else { &file_name },
            audio.content_type.as_deref().unwrap_or("application/octet-stream")
        )
        .as_bytes(),
    );
    body.extend_from_slice(&audio.bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(value: &str) -> Option<Duration> {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::RETRY_AFTER, value.parse().unwrap());
        retry_after(&headers)
    }

    #[test]
    fn retry_after_never_panics_and_huge_values_mean_not_soon() {
        assert_eq!(header("2"), Some(Duration::from_secs(2)));
        assert_eq!(header("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(header("1e300"), Some(Duration::MAX));
        assert_eq!(header("18446744073709551616"), Some(Duration::MAX));
        assert_eq!(header("-1"), None);
        assert_eq!(header("NaN"), None);
        assert_eq!(header("inf"), None);
        assert_eq!(header("Wed, 21 Oct 2026 07:28:00 GMT"), None);
    }

    #[tokio::test]
    async fn connection_errors_name_the_provider_not_its_url() {
        let provider = OpenAiProvider::new(
            "internal",
            "http://svc:hunter2@127.0.0.1:1/v1?key=k-999",
            None,
            reqwest::Client::new(),
        );
        let error = provider
            .client
            .get(provider.url.clone())
            .send()
            .await
            .unwrap_err();
        let failure = provider.transport_error(&error, false);
        assert_eq!(failure.kind, FailureKind::Connect);
        assert!(failure.message.contains("internal"), "{}", failure.message);
        for secret in ["hunter2", "k-999", "127.0.0.1"] {
            assert!(!failure.message.contains(secret), "{}", failure.message);
        }
    }
}

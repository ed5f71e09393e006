//! Failover across a route's targets: each target retried on the failures its rules name,
//! breakers skipped, and a stream that broke after some text continued on the next attempt
//! without repeating what the caller already has.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

use crate::cache::Answer;
use crate::call::Execution;
use crate::log::AttemptRecord;
use crate::provider::{FailureKind, ProviderError, RouterRequest};
use crate::route::{retry_wait, Route};
use crate::settle::millis;
use crate::{Router, RouterError, RouterErrorCode};

impl Router {
    /// Tries the route's targets until one answers.
    pub(crate) async fn execute(
        &self,
        id: Uuid,
        route: &Route,
        request: &RouterRequest,
        deltas: Option<UnboundedSender<String>>,
        exec: &mut Execution,
    ) -> Result<Answer, RouterError> {
        let started = Instant::now();
        let order = route.order();
        let all_cooling = order.iter().all(|t| t.breaker.is_open());
        // Text the caller has already been sent (a later attempt continues it).
        let mut produced = String::new();
        let mut last_error: Option<ProviderError> = None;
        let cooldown = Duration::from_secs_f64(self.gateway.cooldown_secs);
        for target in order {
            let Some(provider) = &target.provider else {
                exec.attempts.push(AttemptRecord {
                    provider: target.provider_name.clone(),
                    model: target.model.clone(),
                    outcome: "unavailable".into(),
                    error_kind: Some("unavailable".into()),
                    status: None,
                    error: Some(format!(
                        "provider `{}` is not available",
                        target.provider_name
                    )),
                    retry_after_ms: None,
                    latency_ms: 0.0,
                    streamed_chars: 0,
                });
                continue;
            };
            let retry = &target.config.retry;
            for attempt in 1..=retry.attempts {
                // A target that is cooling down is skipped, unless every target is. The
                // admission lives until the attempt's outcome is recorded (or it is dropped).
                let admission = if all_cooling {
                    None
                } else {
                    target.breaker.admit()
                };
                if !all_cooling && admission.is_none() {
                    exec.attempts.push(AttemptRecord {
                        provider: target.provider_name.clone(),
                        model: target.model.clone(),
                        outcome: "skipped".into(),
                        error_kind: Some("cooldown".into()),
                        status: None,
                        error: Some("cooling down after repeated failures".into()),
                        retry_after_ms: None,
                        latency_ms: 0.0,
                        streamed_chars: 0,
                    });
                    break;
                }
                let before = produced.len();
                let attempt_started = Instant::now();
                let result = self
                    .attempt(
                        target,
                        provider.as_ref(),
                        request,
                        &mut produced,
                        deltas.as_ref(),
                        exec,
                        started,
                    )
                    .await;
                let latency_ms = millis(attempt_started.elapsed());
                match result {
                    Ok(reply) => {
                        target.breaker.success();
                        exec.attempts.push(AttemptRecord {
                            provider: target.provider_name.clone(),
                            model: target.model.clone(),
                            outcome: "ok".into(),
                            error_kind: None,
                            status: None,
                            error: None,
                            retry_after_ms: None,
                            latency_ms,
                            streamed_chars: produced[before..].chars().count(),
                        });
                        exec.cost = (target.price.input * reply.usage.prompt_tokens as f64
                            + target.price.output * reply.usage.completion_tokens as f64)
                            / 1e6;
                        return Ok(Answer {
                            text: reply.text,
                            tool_calls: reply.tool_calls,
                            finish_reason: reply.finish_reason,
                            usage: reply.usage,
                            provider: target.provider_name.clone(),
                            model: target.model.clone(),
                            system: provider.system().to_string(),
                        });
                    }
                    Err(error) => {
                        // Only failures that say something about the target's health count
                        // towards its cooldown: a request it refuses as invalid (a caller's
                        // mistake) must not take it out for everyone, nor may a request that
                        // was still streaming when its time ran out (the target was answering;
                        // the request was long — e.g. a huge max_tokens).
                        let progressing =
                            produced.len() > before && matches!(error.kind, FailureKind::Timeout);
                        if error.counts_against_target() && !progressing {
                            target
                                .breaker
                                .failure(self.gateway.cooldown_failures, cooldown);
                        }
                        tracing::info!(
                            request = %id,
                            provider = %target.provider_name,
                            model = %target.model,
                            attempt,
                            error = %error.message,
                            "a model attempt failed"
                        );
                        exec.attempts.push(AttemptRecord {
                            provider: target.provider_name.clone(),
                            model: target.model.clone(),
                            outcome: "error".into(),
                            error_kind: Some(error.kind.as_str().into()),
                            status: error.status,
                            error: Some(error.message.clone()),
                            retry_after_ms: error.retry_after.map(millis),
                            latency_ms,
                            streamed_chars: produced[before..].chars().count(),
                        });
                        let wait = retry_wait(&target.config, &error, attempt);
                        last_error = Some(error);
                        match wait {
                            Some(wait) => tokio::time::sleep(wait).await,
                            None => break,
                        }
                    }
                }
            }
        }
        let (message, unquoted) = match &last_error {
            Some(error) => route_failed(&request.route, &exec.attempts, error),
            None => (
                format!(
                    "route `{}` has no target available ({})",
                    request.route,
                    exec.attempts
                        .iter()
                        .filter_map(|a| a.error.clone())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                None,
            ),
        };
        Err(RouterError {
            id,
            code: match &last_error {
                Some(e) if e.kind == FailureKind::Invalid => RouterErrorCode::UpstreamRejected,
                Some(e)
                    if e.kind == FailureKind::Status
                        && matches!(e.status, Some(400 | 404 | 413 | 422)) =>
                {
                    RouterErrorCode::UpstreamRejected
                }
                Some(_) => RouterErrorCode::UpstreamFailed,
                None => RouterErrorCode::Unavailable,
            },
            message,
            unquoted,
            retry_after: None,
            attempts: exec.attempts.clone(),
        })
    }
}

/// Removes a restarted answer's repetition of the text already sent: while the new text could
/// still be that text again, it is held back; once it has repeated all of it, the repetition is
/// dropped; once it differs, what was held back is released.
pub(crate) struct Repeat {
    pub(crate) earlier: String,
    pub(crate) held: String,
    pub(crate) settled: bool,
}

impl Repeat {
    pub(crate) fn new(earlier: &str) -> Self {
        Repeat {
            earlier: earlier.to_string(),
            held: String::new(),
            settled: earlier.is_empty(),
        }
    }

    /// The part of `text` to pass on now.
    pub(crate) fn push(&mut self, text: &str) -> String {
        if self.settled {
            return text.to_string();
        }
        self.held.push_str(text);
        if self.held.len() < self.earlier.len() && self.earlier.starts_with(&self.held) {
            return String::new();
        }
        self.settled = true;
        let held = std::mem::take(&mut self.held);
        match held.strip_prefix(self.earlier.as_str()) {
            Some(rest) => rest.to_string(),
            None => held,
        }
    }

    /// The end of the stream: whatever is still held is new text.
    pub(crate) fn finish(&mut self) -> String {
        self.settled = true;
        std::mem::take(&mut self.held)
    }
}

/// The message of a route whose targets all failed, `error` the last failure: in full, and —
/// when `error` quotes the provider's own words — the same without them (for sessions'
/// journals, [`crate::RouterError::unquoted`]).
pub(crate) fn route_failed(
    route: &str,
    attempts: &[AttemptRecord],
    error: &ProviderError,
) -> (String, Option<String>) {
    let failed = attempts.iter().filter(|a| a.outcome == "error").count();
    let head = format!("route `{route}` failed after {failed} attempt(s); the last: ");
    let unquoted = error.quoted.then(|| {
        let provider = attempts
            .iter()
            .rev()
            .find(|a| a.outcome == "error")
            .map_or("the provider", |a| a.provider.as_str());
        let what = match error.status {
            Some(status) => format!("`{provider}` answered HTTP {status}"),
            None => format!("`{provider}`'s answer failed ({})", error.kind.as_str()),
        };
        format!("{head}{what} (the provider's own message is in the request log)")
    });
    (format!("{head}{}", error.message), unquoted)
}

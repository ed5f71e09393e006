//! Failover across a route's targets, one loop for chat and embeddings: each target retried on
//! the failures its rules name, breakers skipped; for chat, a stream that broke after some text
//! continued on the next attempt without repeating what the caller already has.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;
use uuid::Uuid;

use crate::cache::Answer;
use crate::call::Execution;
use crate::log::AttemptRecord;
use crate::provider::{FailureKind, Provider, ProviderError, ProviderReply, RouterRequest};
use crate::route::{retry_wait, Route, Target};
use crate::settle::millis;
use crate::{Router, RouterError, RouterErrorCode};

/// One try at one target, as the failover loop makes it: chat and embeddings each implement it.
pub(crate) trait Attempt {
    type Answer;

    fn run<'a>(
        &'a mut self,
        target: &'a Target,
        provider: &'a dyn Provider,
    ) -> impl Future<Output = Tried<Self::Answer>> + Send + 'a;

    /// Whether `target` can take this call at all (a chat showing images: only targets whose
    /// model sees them); one that cannot is skipped, not tried.
    fn accepts(&self, target: &Target) -> bool {
        let _ = target;
        true
    }
}

/// What one try at one target came to.
pub(crate) struct Tried<T> {
    pub(crate) result: Result<T, ProviderError>,
    /// Characters of text the try streamed to the caller (a streamed chat answer's).
    pub(crate) streamed_chars: usize,
}

impl Router {
    /// The failover loop every kind of call shares: the route's targets in order, each retried
    /// on the failures its rules name, targets cooling down skipped (unless every one is),
    /// every attempt recorded in `attempts`. `attempt` makes one try at a target; the first
    /// that answers wins, with its target. `what` names the call in logs ("a model attempt").
    pub(crate) async fn failover<'r, A: Attempt>(
        &self,
        id: Uuid,
        route_name: &str,
        route: &'r Route,
        what: &str,
        attempts: &mut Vec<AttemptRecord>,
        attempt: &mut A,
    ) -> Result<(&'r Target, A::Answer), RouterError> {
        let order = route.order();
        let all_cooling = order.iter().all(|t| t.breaker.is_open());
        let mut last_error: Option<ProviderError> = None;
        let cooldown = Duration::from_secs_f64(self.gateway.cooldown_secs);
        for target in order {
            if !attempt.accepts(target) {
                let mut skipped = attempt_record(target, "skipped", None, 0.0, 0);
                skipped.error_kind = Some("images".into());
                skipped.error = Some("its model does not see images".into());
                attempts.push(skipped);
                continue;
            }
            let Some(provider) = &target.provider else {
                let error = ProviderError::new(
                    FailureKind::Unavailable,
                    format!("provider `{}` is not available", target.provider_name),
                );
                attempts.push(attempt_record(target, "unavailable", Some(&error), 0.0, 0));
                continue;
            };
            let retry = &target.config.retry;
            for tries in 1..=retry.attempts {
                // A target that is cooling down is skipped, unless every target is. The
                // admission lives until the attempt's outcome is recorded (or it is dropped).
                let admission = if all_cooling {
                    None
                } else {
                    target.breaker.admit()
                };
                if !all_cooling && admission.is_none() {
                    let mut skipped = attempt_record(target, "skipped", None, 0.0, 0);
                    skipped.error_kind = Some("cooldown".into());
                    skipped.error = Some("cooling down after repeated failures".into());
                    attempts.push(skipped);
                    break;
                }
                let attempt_started = Instant::now();
                let tried = attempt.run(target, provider.as_ref()).await;
                let latency_ms = millis(attempt_started.elapsed());
                match tried.result {
                    Ok(answer) => {
                        target.breaker.success();
                        attempts.push(attempt_record(
                            target,
                            "ok",
                            None,
                            latency_ms,
                            tried.streamed_chars,
                        ));
                        return Ok((target, answer));
                    }
                    Err(error) => {
                        // Only failures that say something about the target's health count
                        // towards its cooldown: a request it refuses as invalid (a caller's
                        // mistake) must not take it out for everyone, nor may a request that
                        // was still streaming when its time ran out (the target was answering;
                        // the request was long — e.g. a huge max_tokens).
                        let progressing =
                            tried.streamed_chars > 0 && matches!(error.kind, FailureKind::Timeout);
                        if error.counts_against_target() && !progressing {
                            target
                                .breaker
                                .failure(self.gateway.cooldown_failures, cooldown);
                        }
                        tracing::info!(
                            request = %id,
                            provider = %target.provider_name,
                            model = %target.model,
                            attempt = tries,
                            error = %error.message,
                            "{what} failed"
                        );
                        attempts.push(attempt_record(
                            target,
                            "error",
                            Some(&error),
                            latency_ms,
                            tried.streamed_chars,
                        ));
                        let wait = retry_wait(&target.config, &error, tries);
                        last_error = Some(error);
                        match wait {
                            Some(wait) => tokio::time::sleep(wait).await,
                            None => break,
                        }
                    }
                }
            }
        }
        Err(all_failed(id, route_name, attempts, last_error.as_ref()))
    }

    /// Tries the route's targets until one answers a chat completion; a stream that broke
    /// after some text is continued by the next attempt without repeating it.
    pub(crate) async fn execute(
        &self,
        id: Uuid,
        route: &Route,
        request: &RouterRequest,
        deltas: Option<UnboundedSender<String>>,
        exec: &mut Execution,
    ) -> Result<Answer, RouterError> {
        let mut chat = ChatAttempt {
            router: self,
            request,
            produced: String::new(),
            deltas,
            first_token: exec.ttft,
            started: Instant::now(),
        };
        let mut attempts = std::mem::take(&mut exec.attempts);
        let outcome = self
            .failover(
                id,
                &request.route,
                route,
                "a model attempt",
                &mut attempts,
                &mut chat,
            )
            .await;
        exec.attempts = attempts;
        exec.ttft = chat.first_token;
        let (target, (reply, system)) = outcome?;
        exec.cost = (target.price.input * reply.usage.prompt_tokens as f64
            + target.price.output * reply.usage.completion_tokens as f64)
            / 1e6;
        Ok(Answer {
            text: reply.text,
            tool_calls: reply.tool_calls,
            finish_reason: reply.finish_reason,
            usage: reply.usage,
            provider: target.provider_name.clone(),
            model: target.model.clone(),
            system,
        })
    }
}

/// A chat completion's tries: the text already sent to the caller (a later attempt continues
/// it without repeating it) and the call's time to its first token.
struct ChatAttempt<'r> {
    router: &'r Router,
    request: &'r RouterRequest,
    produced: String,
    deltas: Option<UnboundedSender<String>>,
    first_token: Option<Duration>,
    started: Instant,
}

impl Attempt for ChatAttempt<'_> {
    /// The reply, and the provider's system name.
    type Answer = (ProviderReply, String);

    async fn run(&mut self, target: &Target, provider: &dyn Provider) -> Tried<Self::Answer> {
        let before = self.produced.len();
        let result = self
            .router
            .attempt(
                target,
                provider,
                self.request,
                &mut self.produced,
                self.deltas.as_ref(),
                &mut self.first_token,
                self.started,
            )
            .await
            .map(|reply| (reply, provider.system().to_string()));
        Tried {
            result,
            streamed_chars: self.produced[before..].chars().count(),
        }
    }

    fn accepts(&self, target: &Target) -> bool {
        target.images || !self.request.has_images()
    }
}

/// The error of a call whose route's targets all failed (`last` the last failure), or that
/// had no target to try.
fn all_failed(
    id: Uuid,
    route: &str,
    attempts: &[AttemptRecord],
    last: Option<&ProviderError>,
) -> RouterError {
    let (message, unquoted) = match last {
        Some(error) => route_failed(route, attempts, error),
        None => (
            format!(
                "route `{route}` has no target available ({})",
                attempts
                    .iter()
                    .filter_map(|a| a.error.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            None,
        ),
    };
    RouterError {
        id,
        code: match last {
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
        attempts: attempts.to_vec(),
        budget: None,
    }
}

/// One attempt at `target`: its outcome, its failure if any, its time and streamed text.
fn attempt_record(
    target: &Target,
    outcome: &str,
    error: Option<&ProviderError>,
    latency_ms: f64,
    streamed_chars: usize,
) -> AttemptRecord {
    AttemptRecord {
        provider: target.provider_name.clone(),
        model: target.model.clone(),
        outcome: outcome.into(),
        error_kind: error.map(|e| e.kind.as_str().to_string()),
        status: error.and_then(|e| e.status),
        error: error.map(|e| e.message.clone()),
        retry_after_ms: error.and_then(|e| e.retry_after).map(millis),
        latency_ms,
        streamed_chars,
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

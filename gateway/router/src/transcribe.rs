//! Speech to text through a route (`POST /v1/audio/transcriptions` with `model` naming one,
//! docs/speech.md): the route's targets tried in the failover loop chat uses
//! (`crate::failover`), under the key's and the route's request limits, logged as one record
//! (the audio's size and type, never its bytes). Not cached. Budgets cannot be reserved
//! before the provider says how long the audio was, so a key with a strict budget is refused
//! rather than let past it.

use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::failover::{Attempt, Tried};
use crate::log::{AttemptRecord, LogStatus, RequestLogEntry};
use crate::provider::{AudioInput, FailureKind, Provider, ProviderError, TranscribeReply};
use crate::route::Target;
use crate::{CallOptions, Router, RouterError, RouterErrorCode};

/// Audio to transcribe through a route.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TranscribeRequest {
    pub route: String,
    pub audio: AudioInput,
}

/// A finished transcription.
#[derive(Debug, Clone)]
pub struct TranscribeResponse {
    pub id: Uuid,
    pub text: String,
    pub language: Option<String>,
    pub duration: Option<f64>,
    /// The provider and model of the target that answered.
    pub provider: String,
    pub model: String,
    pub attempts: Vec<AttemptRecord>,
    pub latency: Duration,
}

impl Router {
    /// Transcribes the request's audio through its route, logged as one record.
    pub async fn transcribe(
        &self,
        request: TranscribeRequest,
        options: CallOptions,
    ) -> Result<TranscribeResponse, RouterError> {
        let id = options.request_id.unwrap_or_else(Uuid::now_v7);
        let started = Instant::now();
        let at = chrono::Utc::now();
        let span = tracing::info_span!(
            "transcriptions",
            "otel.name" = format!("transcriptions {}", request.route),
            "otel.kind" = "client",
            "gen_ai.request.model" = %request.route,
            "gen_ai.response.id" = %id,
        );
        let run = self.run_transcribe(id, &request, &options, started);
        let result = tracing::Instrument::instrument(run, span).await;
        let latency = started.elapsed();
        let base = self.base_record(id, at, &options, &request.route, latency, false);
        let record = match &result {
            Ok(response) => RequestLogEntry {
                provider: Some(response.provider.clone()),
                model: Some(response.model.clone()),
                status: LogStatus::Ok,
                attempts: response.attempts.clone(),
                ..base
            },
            Err(error) => self.failed_record(base, error, latency),
        };
        if let Some(log) = &self.log {
            log.record(record);
        }
        result
    }

    async fn run_transcribe(
        &self,
        id: Uuid,
        request: &TranscribeRequest,
        options: &CallOptions,
        started: Instant,
    ) -> Result<TranscribeResponse, RouterError> {
        let key = options.api_key.as_deref();
        let route = self.admit(id, &request.route, key)?;
        self.check_key_limits(id, key).await?;
        if let Some(key) = key {
            let limits = self.directory_budgets(id, key).await?;
            if self.budgeted(&limits) {
                return Err(RouterError {
                    id,
                    code: RouterErrorCode::Forbidden,
                    message: "this key has a budget, and transcriptions through a route are not \
                              charged to budgets yet: use the local model (`whisper`) or a key \
                              without one"
                        .into(),
                    unquoted: None,
                    retry_after: None,
                    attempts: Vec::new(),
                    budget: None,
                });
            }
        }
        let mut attempts = Vec::new();
        let outcome = self
            .failover(
                id,
                &request.route,
                route,
                "a transcription attempt",
                &mut attempts,
                &mut TranscribeAttempt {
                    audio: &request.audio,
                },
            )
            .await;
        match outcome {
            Ok((target, reply)) => Ok(TranscribeResponse {
                id,
                text: reply.text,
                language: reply.language,
                duration: reply.duration,
                provider: target.provider_name.clone(),
                model: target.model.clone(),
                attempts,
                latency: started.elapsed(),
            }),
            Err(error) => Err(RouterError { attempts, ..error }),
        }
    }
}

/// A transcription's tries.
struct TranscribeAttempt<'r> {
    audio: &'r AudioInput,
}

impl Attempt for TranscribeAttempt<'_> {
    type Answer = TranscribeReply;

    async fn run(&mut self, target: &Target, provider: &dyn Provider) -> Tried<TranscribeReply> {
        let deadline = Duration::from_secs_f64(target.config.timeout_secs);
        let result =
            match tokio::time::timeout(deadline, provider.transcribe(&target.model, self.audio))
                .await
            {
                Ok(result) => result,
                Err(_) => Err(ProviderError::new(
                    FailureKind::Timeout,
                    format!(
                        "{} did not answer within {}s",
                        target.provider_name, target.config.timeout_secs
                    ),
                )),
            };
        Tried {
            result,
            streamed_chars: 0,
        }
    }
}

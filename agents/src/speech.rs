//! The speech service behind `POST /v1/audio/transcriptions` (docs/speech.md): the local
//! Whisper model (`stead-inference`'s speech pool), loaded on the first transcription so a
//! server that never transcribes never pays for it. Audio is decoded off the async threads.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use stead_config::Config;
use stead_http::speech::{
    SpeechApi, TranscriptSegment, Transcription, TranscriptionRequest, LOCAL_SPEECH_MODELS,
};
use stead_http::{ApiError, ErrorCode};
use stead_inference::speech::audio::{self, AudioError};
use stead_inference::speech::{SpeechPool, SpeechPoolConfig, DEFAULT_SPEECH_MODEL};
use tokio::sync::OnceCell;

/// Why the model could not be loaded (kept: a later request is told the same).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct LoadFailed(String);

/// The local speech model, loaded when first asked.
pub struct LocalSpeech {
    pool_config: SpeechPoolConfig,
    max_seconds: u64,
    pool: OnceCell<Result<Arc<SpeechPool>, LoadFailed>>,
}

impl LocalSpeech {
    /// The service `[speech]` configures; `None` when it is off.
    pub fn configured(config: &Config) -> Option<Arc<Self>> {
        let speech = &config.speech;
        if !speech.enabled {
            return None;
        }
        let model_dir = speech.model_dir.clone().unwrap_or_else(|| {
            stead_inference::setup::model_dir(&config.server.data_dir, DEFAULT_SPEECH_MODEL)
        });
        let mut pool_config = SpeechPoolConfig::new(
            model_dir,
            stead_inference::setup::runtime_library(&config.server.data_dir),
        );
        pool_config.threads = speech.threads;
        Some(Arc::new(LocalSpeech {
            pool_config,
            max_seconds: speech.max_seconds,
            pool: OnceCell::new(),
        }))
    }

    /// The model directory it loads.
    pub fn model_dir(&self) -> &PathBuf {
        &self.pool_config.model_dir
    }

    /// The request's audio as 16 kHz mono samples, decoded off the async threads.
    async fn decode(&self, request: &TranscriptionRequest) -> Result<Vec<f32>, ApiError> {
        let max_seconds = self.max_seconds;
        let content_type = request.content_type.clone();
        let bytes = request.audio.to_vec();
        tokio::task::spawn_blocking(move || {
            audio::decode(bytes, content_type.as_deref(), max_seconds)
        })
        .await
        .map_err(|e| ApiError::internal("the audio decoder failed", e))?
        .map_err(|e| match e {
            AudioError::Unsupported(message) => {
                ApiError::new(ErrorCode::UnsupportedMediaType, message)
            }
            AudioError::Invalid(_) => ApiError::new(ErrorCode::MalformedRequest, e.to_string()),
            AudioError::TooLong { .. } => ApiError::new(ErrorCode::PayloadTooLarge, e.to_string()),
        })
    }

    async fn pool(&self) -> Result<Arc<SpeechPool>, ApiError> {
        let loaded = self
            .pool
            .get_or_init(|| async {
                match SpeechPool::start(self.pool_config.clone()).await {
                    Ok(pool) => {
                        tracing::info!(dir = %self.pool_config.model_dir.display(), "speech model loaded");
                        Ok(Arc::new(pool))
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the speech model cannot be loaded");
                        Err(LoadFailed(e.to_string()))
                    }
                }
            })
            .await;
        loaded.clone().map_err(|e| {
            ApiError::new(
                ErrorCode::Unavailable,
                format!("the local speech model cannot be loaded ({e}); `stead setup` prepares it"),
            )
        })
    }
}

#[async_trait]
impl SpeechApi for LocalSpeech {
    async fn transcribe(&self, request: TranscriptionRequest) -> Result<Transcription, ApiError> {
        if !LOCAL_SPEECH_MODELS.contains(&request.model.as_str()) {
            return Err(ApiError::new(
                ErrorCode::ModelNotFound,
                format!(
                    "no speech model or route `{}` (the local model is `whisper`)",
                    request.model
                ),
            ));
        }
        let samples = self.decode(&request).await?;
        let pool = self.pool().await?;
        let model = pool.model();
        if let Some(language) = &request.language {
            let language = language.to_ascii_lowercase();
            if model.english_only && language != "en" && language != "english" {
                return Err(ApiError::new(
                    ErrorCode::MalformedRequest,
                    format!(
                        "the local speech model ({}) transcribes English only, not `{language}`",
                        model.name
                    ),
                ));
            }
        }
        let transcript = pool.transcribe(samples).await.map_err(|e| match e {
            stead_inference::Error::Overloaded { .. } => ApiError::new(
                ErrorCode::Overloaded,
                "the speech model has a full queue; send the request again",
            ),
            other => ApiError::internal("the transcription failed", other),
        })?;
        Ok(Transcription {
            text: transcript.text,
            language: if transcript.language == "en" {
                "english".into()
            } else {
                transcript.language
            },
            duration: transcript.duration,
            segments: transcript
                .segments
                .into_iter()
                .enumerate()
                .map(|(id, s)| TranscriptSegment {
                    id,
                    start: s.start,
                    end: s.end,
                    text: s.text,
                    tokens: s.tokens,
                    temperature: 0.0,
                    avg_logprob: f64::from(s.avg_logprob),
                    no_speech_prob: f64::from(s.no_speech_prob),
                })
                .collect(),
        })
    }
}

//! `POST /v1/audio/transcriptions` (docs/speech.md): OpenAI's transcription endpoint — a
//! `multipart/form-data` body with the audio in `file`, `model`, `language`,
//! `response_format` (`json`, `text` or `verbose_json`), `prompt` and `temperature` — answered
//! by the local Whisper model. Stead's addition: `artifact_id` in place of `file` transcribes an
//! artifact the caller may read (the web UI's voice messages: uploaded once, kept, transcribed).
//! The work is the binary's speech service, reached through [`SpeechApi`].

use async_trait::async_trait;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::auth::Caller;
use crate::views::ErrorBody;
use crate::{ApiError, AppState, ErrorCode};

/// The names `model` may give for the local model: Stead's, OpenAI's (so its clients' usual
/// `whisper-1` works) and the model directory's. Any other name is a route's.
pub const LOCAL_SPEECH_MODELS: [&str; 3] = ["whisper", "whisper-1", "whisper-tiny.en"];

/// Audio to transcribe, as the edge read it.
#[derive(Debug, Clone)]
pub struct TranscriptionRequest {
    pub model: String,
    pub audio: Bytes,
    /// The type the client or the artifact store gave (a hint for the container).
    pub content_type: Option<String>,
    /// ISO 639-1 code the client says the speech is in.
    pub language: Option<String>,
}

/// One stretch of the transcript (`verbose_json`).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TranscriptSegment {
    pub id: usize,
    /// Seconds from the start.
    pub start: f64,
    pub end: f64,
    pub text: String,
    pub tokens: Vec<u32>,
    pub temperature: f64,
    pub avg_logprob: f64,
    pub no_speech_prob: f64,
}

/// What the speech service heard.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Transcription {
    pub text: String,
    /// The language's English name, as OpenAI answers (`english`).
    pub language: String,
    /// Seconds of audio.
    pub duration: f64,
    pub segments: Vec<TranscriptSegment>,
}

/// What the HTTP edge asks of the speech service. Errors are answered as they are.
#[async_trait]
pub trait SpeechApi: Send + Sync {
    async fn transcribe(&self, request: TranscriptionRequest) -> Result<Transcription, ApiError>;
}

fn malformed(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::MalformedRequest, message)
}

/// The fields of the form.
#[derive(Default)]
struct Form {
    /// The bytes, their declared type and the file's name.
    file: Option<(Bytes, Option<String>, String)>,
    artifact_id: Option<String>,
    model: Option<String>,
    language: Option<String>,
    response_format: Option<String>,
}

async fn read_form(body: Bytes, headers: &HeaderMap) -> Result<Form, ApiError> {
    let boundary = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| multer::parse_boundary(v).ok())
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "send the audio as `multipart/form-data` (fields `file` and `model`)",
            )
        })?;
    let invalid = |e: multer::Error| {
        ApiError::new(
            ErrorCode::InvalidBody,
            format!("the multipart body cannot be read: {e}"),
        )
    };
    let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(body) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut form = Form::default();
    while let Some(field) = multipart.next_field().await.map_err(invalid)? {
        let name = field.name().unwrap_or_default().to_string();
        if name == "file" {
            let declared = field.content_type().map(ToString::to_string);
            let name = field.file_name().unwrap_or("audio").to_string();
            form.file = Some((field.bytes().await.map_err(invalid)?, declared, name));
            continue;
        }
        let text = field.text().await.map_err(invalid)?;
        let slot = match name.as_str() {
            "artifact_id" => &mut form.artifact_id,
            "model" => &mut form.model,
            "language" => &mut form.language,
            "response_format" => &mut form.response_format,
            // Accepted as OpenAI's clients send them; decoding is greedy, without a prompt.
            "prompt" | "temperature" | "timestamp_granularities[]" | "stream" => continue,
            other => {
                return Err(malformed(format!(
                    "unknown field `{other}` (file, artifact_id, model, language, response_format, prompt, temperature)"
                )))
            }
        };
        *slot = Some(text.trim().to_string());
    }
    Ok(form)
}

/// Transcribes speech (OpenAI-compatible).
#[utoipa::path(post, path = "/v1/audio/transcriptions", request_body(content = Vec<u8>, content_type = "multipart/form-data", description = "`file` (WAV, MP3, FLAC, Ogg or WebM audio; or `artifact_id`, an artifact the caller may read), `model` (`whisper`, or `whisper-1`), `language` (`en`), `response_format` (`json`, `text`, `verbose_json`)"), responses((status = 200, description = "`{\"text\"}`; `verbose_json`: with `language`, `duration` and `segments`; `text`: the text alone", body = Transcription), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 503, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn transcriptions(
    State(state): State<AppState>,
    Caller(caller): Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(ErrorCode::PayloadTooLarge, rejection.body_text())
        } else {
            ApiError::new(ErrorCode::InvalidBody, rejection.body_text())
        }
    })?;
    let form = read_form(body, &headers).await?;
    let format = form.response_format.as_deref().unwrap_or("json");
    if !matches!(format, "json" | "text" | "verbose_json") {
        return Err(malformed(format!(
            "`response_format` must be json, text or verbose_json, not `{format}`"
        )));
    }
    let model = form
        .model
        .filter(|m| !m.is_empty())
        .ok_or_else(|| malformed("`model` is required (`whisper`: the local speech model)"))?;
    let (audio, content_type, file_name) = match (form.file, form.artifact_id) {
        (Some(_), Some(_)) => return Err(malformed("send `file` or `artifact_id`, not both")),
        (Some((audio, declared, name)), None) => {
            caller.require_operator()?;
            (audio, declared, name)
        }
        (None, Some(id)) => {
            let id: Uuid = id
                .parse()
                .map_err(|_| malformed(format!("`artifact_id` `{id}` is not an artifact id")))?;
            let (artifact, bytes) = crate::artifacts::read_bytes(&state, &caller, id).await?;
            (bytes, Some(artifact.content_type), format!("artifact-{id}"))
        }
        (None, None) => return Err(malformed("`file` (the audio) is required")),
    };
    if audio.is_empty() {
        return Err(malformed("`file` is empty"));
    }
    let language = form.language.filter(|l| !l.is_empty());
    let routed = !LOCAL_SPEECH_MODELS.contains(&model.as_str()) && state.routes.contains(&model);
    let transcription = if routed {
        let options = crate::gateway::options(&caller, &headers, &model)?;
        let audio = stead_model::provider::AudioInput {
            bytes: audio.to_vec(),
            file_name,
            content_type,
            language,
        };
        let request = stead_router::TranscribeRequest {
            route: model,
            audio,
        };
        match state.model_router.transcribe(request, options).await {
            Ok(answer) => Transcription {
                text: answer.text,
                language: answer.language.unwrap_or_default(),
                duration: answer.duration.unwrap_or_default(),
                segments: Vec::new(),
            },
            Err(error) => return Ok(crate::gateway::router_error(&error)),
        }
    } else {
        let speech = state.speech.as_ref().ok_or_else(|| {
            ApiError::new(ErrorCode::ModelNotFound, "this server has no speech model")
        })?;
        speech
            .transcribe(TranscriptionRequest {
                model,
                audio,
                content_type,
                language,
            })
            .await?
    };
    Ok(match format {
        "text" => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{}\n", transcription.text),
        )
            .into_response(),
        "verbose_json" => Json(json!({
            "task": "transcribe",
            "language": transcription.language,
            "duration": transcription.duration,
            "text": transcription.text,
            "segments": transcription.segments,
        }))
        .into_response(),
        _ => Json(json!({ "text": transcription.text })).into_response(),
    })
}

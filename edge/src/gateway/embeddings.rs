//! `POST /v1/embeddings`: OpenAI-compatible embeddings through the model router (`model` names
//! a route; docs/knowledge.md). Floats or, as the official clients ask by default, base64 of
//! the little-endian `float32` values. Logged, cached and limited like chat completions.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde_json::{json, Value};
use stead_router::EmbedRequest;

use super::{options, router_error, router_headers};
use crate::auth::Caller;
use crate::views::ErrorBody;
use crate::{ApiError, ApiJson, AppState, ErrorCode};

/// Most inputs in one request (OpenAI's own limit).
pub const MAX_INPUTS: usize = 2048;

fn malformed(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::MalformedRequest, message)
}

/// The texts of `input`: one string or an array of strings, none empty.
fn inputs(input: &Value) -> Result<Vec<String>, ApiError> {
    let texts: Vec<String> = match input {
        Value::String(text) => vec![text.clone()],
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        Value::Array(_) => {
            return Err(malformed(
                "`input` holds token arrays or other values: send text (a string or an array of strings)",
            ))
        }
        Value::Null => return Err(malformed("`input` is required")),
        _ => return Err(malformed("`input` must be a string or an array of strings")),
    };
    if texts.is_empty() || texts.iter().any(|t| t.is_empty()) {
        return Err(malformed(
            "`input` must not be empty, nor hold an empty string",
        ));
    }
    if texts.len() > MAX_INPUTS {
        return Err(malformed(format!(
            "`input` holds {} texts; at most {MAX_INPUTS} per request",
            texts.len()
        )));
    }
    Ok(texts)
}

/// OpenAI-compatible embeddings through the model router (`model` names a route).
#[utoipa::path(post, path = "/v1/embeddings", request_body(content = Object, description = "An OpenAI embeddings request: `model` (a route), `input` (a string or an array of strings), `encoding_format` (`float` or `base64`), `dimensions` (must be the model's)."), responses((status = 200, description = "A `list` of `embedding` objects with `usage`"), (status = 400, body = ErrorBody), (status = 404, description = "No such route", body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, description = "Rate limit or budget; see Retry-After", body = ErrorBody), (status = 502, description = "Every target failed", body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn embeddings(
    State(state): State<AppState>,
    Caller(caller): Caller,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    caller.require_operator()?;
    let Some(route) = body["model"].as_str().filter(|m| !m.is_empty()) else {
        return Err(malformed(
            "`model` (a route name, see GET /v1/models) is required",
        ));
    };
    let texts = inputs(&body["input"])?;
    let base64 = match body.get("encoding_format").unwrap_or(&Value::Null) {
        Value::Null => false,
        Value::String(f) if f == "float" => false,
        Value::String(f) if f == "base64" => true,
        other => {
            return Err(malformed(format!(
                "`encoding_format` must be \"float\" or \"base64\", not {other}"
            )))
        }
    };
    let dimensions = match body.get("dimensions").unwrap_or(&Value::Null) {
        Value::Null => None,
        value => Some(
            value
                .as_u64()
                .filter(|d| *d > 0)
                .ok_or_else(|| malformed("`dimensions` must be a positive integer"))?,
        ),
    };
    let options = options(&caller, &headers, route)?;
    let request = EmbedRequest {
        route: route.to_string(),
        inputs: texts,
    };
    let answer = match state.model_router.embed(request, options).await {
        Ok(answer) => answer,
        Err(error) => return Ok(router_error(&error)),
    };
    let made = answer.vectors.first().map_or(0, Vec::len) as u64;
    if let Some(asked) = dimensions.filter(|d| *d != made) {
        return Err(malformed(format!(
            "route `{route}` makes embeddings of {made} dimensions, not {asked} (`dimensions` cannot shorten them)"
        )));
    }
    let data: Vec<Value> = answer
        .vectors
        .iter()
        .enumerate()
        .map(|(index, vector)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(vector)
            };
            json!({ "object": "embedding", "index": index, "embedding": embedding })
        })
        .collect();
    let mut response = Json(json!({
        "object": "list",
        "model": route,
        "data": data,
        "usage": { "prompt_tokens": answer.prompt_tokens, "total_tokens": answer.prompt_tokens },
    }))
    .into_response();
    router_headers(
        response.headers_mut(),
        answer.id,
        &answer.provider,
        &answer.model,
        answer.cache,
        answer.attempts.len(),
    );
    Ok(response)
}

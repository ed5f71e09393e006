//! The AI gateway's HTTP face: the router's chat APIs — OpenAI chat completions
//! ([`openai`]), Anthropic messages ([`anthropic`]), OpenAI responses ([`responses`]), all
//! three through one streamed call ([`streamed`]) — embeddings ([`embeddings`]) and the request
//! log's reads ([`logs`]), with what they share: the router's errors as HTTP answers, the
//! caller's call options and the router's response headers.
//!
//! Response headers: `x-stead-request-id` (the log record's id), `x-stead-cache`
//! (`hit`, `miss`, `bypass`, `off`), and on whole answers `x-stead-provider`, `x-stead-model`
//! and `x-stead-attempts`. A stream's headers go out before the answering target is known, so
//! its last chunk carries a `stead` object with the provider, model and attempts.

pub(crate) mod anthropic;
pub(crate) mod embeddings;
pub(crate) mod logs;
pub(crate) mod openai;
pub(crate) mod responses;
mod streamed;

use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use stead_router::{parse_metadata, CacheMode, CallOptions, RouterError, RouterResponse};
use uuid::Uuid;

use crate::auth::Principal;
use crate::{ApiError, ErrorCode};

/// The per-key name limits and budgets count against.
pub(crate) fn router_error(error: &RouterError) -> Response {
    let mut response = ApiError::new(error.code.into(), error.message.clone()).into_response();
    let headers = response.headers_mut();
    if let Some(after) = error.retry_after {
        // Whole seconds, rounded up, at least 1.
        let secs = after
            .as_secs()
            .saturating_add(u64::from(after.subsec_nanos() > 0));
        headers.insert("retry-after", HeaderValue::from(secs.max(1)));
    }
    set(headers, "x-stead-request-id", &error.id.to_string());
    response
}

pub(crate) fn set(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

/// The call's options from the caller and the request headers, for a call of `route`: a key
/// or a project limited to some routes finds no other (the same 404 as a route that does not
/// exist).
pub(crate) fn options(
    principal: &Principal,
    headers: &HeaderMap,
    route: &str,
) -> Result<CallOptions, ApiError> {
    if !principal.may_use_route(route) {
        return Err(ApiError::new(
            ErrorCode::ModelNotFound,
            format!("no route is named `{route}` (GET /v1/models lists yours)"),
        ));
    }
    let metadata = match headers.get("x-stead-metadata") {
        None => Default::default(),
        Some(value) => {
            let text = value.to_str().map_err(|_| {
                ApiError::new(
                    ErrorCode::InvalidMetadata,
                    "x-stead-metadata must be ASCII JSON",
                )
            })?;
            parse_metadata(text)
                .map_err(|e| ApiError::new(ErrorCode::InvalidMetadata, e.to_string()))?
        }
    };
    let bypass = headers
        .get("x-stead-cache")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| matches!(v.trim(), "bypass" | "no-cache" | "no-store"))
        || headers
            .get("cache-control")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("no-cache") || v.contains("no-store"));
    Ok(CallOptions {
        request_id: Some(Uuid::now_v7()),
        session_id: None,
        api_key: principal.limits_key(),
        metadata,
        cache: if bypass {
            CacheMode::Bypass
        } else {
            CacheMode::Use
        },
        // A caller of the gateway is refused at a spent budget; only sessions park on one.
        budget_grant_usd: None,
    })
}

/// OpenAI-compatible chat completions through the model router (`model` names a route).
/// A whole chat answer (of any of the three chat APIs) as JSON with the router's headers.
pub(crate) fn answer_json(body: Value, answer: &RouterResponse) -> Response {
    let mut response = Json(body).into_response();
    answer_headers(response.headers_mut(), answer);
    response
}

pub(super) fn answer_headers(headers: &mut HeaderMap, answer: &RouterResponse) {
    router_headers(
        headers,
        answer.id,
        &answer.provider,
        &answer.model,
        answer.cache,
        answer.attempts.len(),
    );
}

/// The router headers of a whole answer (chat or embeddings): its log record's id, who
/// answered, what the cache did and how many attempts it took.
pub(crate) fn router_headers(
    headers: &mut HeaderMap,
    id: Uuid,
    provider: &str,
    model: &str,
    cache: stead_router::CacheStatus,
    attempts: usize,
) {
    set(headers, "x-stead-request-id", &id.to_string());
    set(headers, "x-stead-provider", provider);
    set(headers, "x-stead-model", model);
    set(headers, "x-stead-cache", cache.as_str());
    set(headers, "x-stead-attempts", &attempts.to_string());
}

//! The model router's HTTP face: `POST /v1/chat/completions` (OpenAI-compatible, streamed as
//! server-sent events or not, tools included), and the request log: `GET /v1/gateway/logs`
//! (filtered, newest first, cursor-paginated) and `GET /v1/gateway/stats` (grouped figures).
//!
//! Response headers: `x-stead-request-id` (the log record's id), `x-stead-cache`
//! (`hit`, `miss`, `bypass`, `off`), and on whole answers `x-stead-provider`, `x-stead-model`
//! and `x-stead-attempts`. A stream's headers go out before the answering target is known, so
//! its last chunk carries a `stead` object with the provider, model and attempts.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use stead_persistence::request_log::{RequestLogQuery, StatsGroupBy, MAX_LOG_PAGE};
use stead_router::wire::{self, Delta, ParsedRequest};
use stead_router::{parse_metadata, CacheMode, CallOptions, RouterError, RouterResponse};
use uuid::Uuid;

use crate::auth::{Caller, Principal};
use crate::streamed::{self, Refused, Step};
use crate::views::{ErrorBody, LogPage, LogStats};
use crate::{ApiError, ApiJson, ApiQuery, AppState, ErrorCode};

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

/// The call's options from the caller and the request headers.
pub(crate) fn options(principal: &Principal, headers: &HeaderMap) -> Result<CallOptions, ApiError> {
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
    })
}

/// OpenAI-compatible chat completions through the model router (`model` names a route).
#[utoipa::path(post, path = "/v1/chat/completions", request_body(content = Object, description = "An OpenAI chat completions request; `model` names a route (GET /v1/models)."), responses((status = 200, description = "A `chat.completion`, or `text/event-stream` chunks when `stream` is true"), (status = 400, body = ErrorBody), (status = 404, description = "No such route", body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, description = "Rate limit or budget; see Retry-After", body = ErrorBody), (status = 502, description = "Every target failed", body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn chat_completions(
    State(state): State<AppState>,
    Caller(caller): Caller,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    caller.require_operator()?;
    let ParsedRequest {
        request,
        stream,
        include_usage,
    } = wire::parse_request(&body)
        .map_err(|e| ApiError::new(ErrorCode::MalformedRequest, e.to_string()))?;
    let mut options = options(&caller, &headers)?;
    let id = *options.request_id.get_or_insert_with(Uuid::now_v7);
    let created = chrono::Utc::now().timestamp();
    let route = request.route.clone();
    if !stream {
        return match state.model_router.call(request, options, None).await {
            Ok(answer) => {
                let body = wire::completion_json(
                    &format!("chatcmpl-{}", id.simple()),
                    created,
                    &route,
                    &answer.text,
                    &answer.tool_calls,
                    answer.finish_reason,
                    &answer.usage,
                );
                let mut response = Json(body).into_response();
                answer_headers(response.headers_mut(), &answer);
                Ok(response)
            }
            Err(error) => Ok(router_error(&error)),
        };
    }

    let streamed = match streamed::start(state.model_router.clone(), request, options).await {
        Ok(streamed) => streamed,
        Err(Refused::Router(error)) => return Ok(router_error(&error)),
        Err(Refused::Internal(error)) => return Err(error),
    };
    let chat_id = format!("chatcmpl-{}", id.simple());
    let mut started = false;
    // Each step becomes one or more chunks; the first also opens the message.
    let response = streamed::sse(streamed, id, move |step| {
        let mut out: Vec<Value> = Vec::new();
        if !std::mem::replace(&mut started, true) {
            out.push(wire::chunk_json(
                &chat_id,
                created,
                &route,
                Delta::opening(),
                None,
            ));
        }
        let done = match step {
            Step::Text(text) => {
                out.push(wire::chunk_json(
                    &chat_id,
                    created,
                    &route,
                    Delta::text(text),
                    None,
                ));
                false
            }
            Step::Done(result) => {
                match *result {
                    Ok(answer) => {
                        if !answer.tool_calls.is_empty() {
                            out.push(wire::chunk_json(
                                &chat_id,
                                created,
                                &route,
                                Delta::tool_calls(&answer.tool_calls),
                                None,
                            ));
                        }
                        let mut last = wire::chunk_json(
                            &chat_id,
                            created,
                            &route,
                            Delta::default(),
                            Some(answer.finish_reason),
                        );
                        last["stead"] = json!({
                            "request_id": answer.id,
                            "provider": answer.provider,
                            "model": answer.model,
                            "cache": answer.cache.as_str(),
                            "attempts": answer.attempts.len(),
                        });
                        out.push(last);
                        if include_usage {
                            out.push(wire::usage_chunk_json(
                                &chat_id,
                                created,
                                &route,
                                &answer.usage,
                            ));
                        }
                    }
                    Err(error) => out.push(json!({
                        "error": { "code": error.code, "message": error.message },
                    })),
                }
                true
            }
        };
        let mut events: Vec<Event> = out
            .into_iter()
            .map(|chunk| Event::default().data(chunk.to_string()))
            .collect();
        if done {
            events.push(Event::default().data("[DONE]"));
        }
        events
    });
    Ok(response)
}

/// A whole chat answer (of any of the three chat APIs) as JSON with the router's headers.
pub(crate) fn answer_json(body: Value, answer: &RouterResponse) -> Response {
    let mut response = Json(body).into_response();
    answer_headers(response.headers_mut(), answer);
    response
}

fn answer_headers(headers: &mut HeaderMap, answer: &RouterResponse) {
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

/// A store error: bad input there (a cursor, a metadata key) is a bad query parameter.
fn query_error(error: stead_persistence::Error) -> ApiError {
    match error {
        stead_persistence::Error::InvalidInput(message) => {
            ApiError::new(ErrorCode::InvalidQuery, message)
        }
        other => other.into(),
    }
}

/// Filters shared by the log and its statistics, from the query string.
fn log_query(params: &HashMap<String, String>) -> Result<RequestLogQuery, ApiError> {
    let time = |key: &str| -> Result<Option<chrono::DateTime<chrono::Utc>>, ApiError> {
        params
            .get(key)
            .map(|v| {
                chrono::DateTime::parse_from_rfc3339(v)
                    .map(|t| t.with_timezone(&chrono::Utc))
                    .map_err(|_| {
                        ApiError::new(
                            ErrorCode::InvalidQuery,
                            format!("`{key}` must be an RFC 3339 time"),
                        )
                    })
            })
            .transpose()
    };
    let mut metadata = None;
    for (key, value) in params {
        if let Some(name) = key.strip_prefix("metadata.") {
            if metadata.is_some() {
                return Err(ApiError::new(
                    ErrorCode::InvalidQuery,
                    "filter on one metadata key at a time",
                ));
            }
            metadata = Some((name.to_string(), value.clone()));
        }
    }
    Ok(RequestLogQuery {
        route: params.get("route").cloned(),
        provider: params.get("provider").cloned(),
        model: params.get("model").cloned(),
        status: params.get("status").cloned(),
        api_key: params.get("api_key").cloned(),
        session_id: params
            .get("session_id")
            .map(|s| {
                Uuid::try_parse(s).map_err(|_| {
                    ApiError::new(ErrorCode::InvalidQuery, "`session_id` must be a UUID")
                })
            })
            .transpose()?,
        cache_hit: match params.get("cache").map(String::as_str) {
            None => None,
            Some("hit") => Some(true),
            Some("miss") => Some(false),
            Some(_) => {
                return Err(ApiError::new(
                    ErrorCode::InvalidQuery,
                    "`cache` must be hit or miss",
                ))
            }
        },
        since: time("since")?,
        until: time("until")?,
        metadata,
        limit: match params.get("limit") {
            None => 0,
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_LOG_PAGE).contains(n))
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::InvalidQuery,
                        format!("`limit` must be an integer from 1 to {MAX_LOG_PAGE}"),
                    )
                })?,
        },
        cursor: params.get("cursor").cloned(),
    })
}

/// The request log, newest first. Filters: `route`, `provider`, `model`, `status`,
/// `session_id`, `api_key`, `cache` (hit|miss), `since`, `until` (RFC 3339), `metadata.KEY`.
#[utoipa::path(get, path = "/v1/gateway/logs", params(("limit" = Option<u32>, Query, minimum = 1, maximum = 1000), ("cursor" = Option<String>, Query), ("route" = Option<String>, Query), ("status" = Option<String>, Query)), responses((status = 200, body = LogPage), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn logs(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
) -> Result<Json<LogPage>, ApiError> {
    caller.require_operator()?;
    let query = log_query(&params)?;
    let page = state
        .store
        .list_request_log(&query)
        .await
        .map_err(query_error)?;
    Ok(Json(LogPage {
        logs: page.entries,
        next_cursor: page.next_cursor,
    }))
}

/// Figures of the request log grouped by `group_by` (`route`, `provider`, `model` or
/// `metadata.KEY`), over the rows the same filters as `/v1/gateway/logs` select.
#[utoipa::path(get, path = "/v1/gateway/stats", params(("group_by" = Option<String>, Query), ("since" = Option<String>, Query)), responses((status = 200, body = LogStats), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn stats(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
) -> Result<Json<LogStats>, ApiError> {
    caller.require_operator()?;
    let group_by = params.get("group_by").map_or("route", String::as_str);
    let grouping: StatsGroupBy = group_by.parse().map_err(query_error)?;
    let query = log_query(&params)?;
    let groups = state
        .store
        .request_log_stats(&query, &grouping)
        .await
        .map_err(query_error)?;
    Ok(Json(LogStats {
        group_by: group_by.to_string(),
        groups,
    }))
}

//! `POST /v1/chat/completions`: OpenAI-compatible chat completions on the model router,
//! streamed as server-sent events or not, tools included (docs/gateway.md).

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use stead_router::completions::{self, Delta, ParsedRequest};
use uuid::Uuid;

use super::streamed::{self, Refused, Step};
use super::{answer_headers, options, router_error};
use crate::auth::Caller;
use crate::views::ErrorBody;
use crate::{ApiError, ApiJson, AppState, ErrorCode};

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
    } = completions::parse_request(&body)
        .map_err(|e| ApiError::new(ErrorCode::MalformedRequest, e.to_string()))?;
    let mut options = options(&caller, &headers, &request.route)?;
    let id = *options.request_id.get_or_insert_with(Uuid::now_v7);
    let created = chrono::Utc::now().timestamp();
    let route = request.route.clone();
    if !stream {
        return match state.model_router.call(request, options, None).await {
            Ok(answer) => {
                let body = completions::completion_json(
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
            out.push(completions::chunk_json(
                &chat_id,
                created,
                &route,
                Delta::opening(),
                None,
            ));
        }
        let done = match step {
            Step::Text(text) => {
                out.push(completions::chunk_json(
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
                            out.push(completions::chunk_json(
                                &chat_id,
                                created,
                                &route,
                                Delta::tool_calls(&answer.tool_calls),
                                None,
                            ));
                        }
                        let mut last = completions::chunk_json(
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
                            out.push(completions::usage_chunk_json(
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

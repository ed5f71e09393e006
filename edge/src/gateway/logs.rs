//! The request log's reads: `GET /v1/gateway/logs` (filtered, newest first,
//! cursor-paginated) and `GET /v1/gateway/stats` (grouped figures).

use std::collections::HashMap;

use axum::extract::State;
use axum::Json;
use stead_persistence::request_log::{RequestLogQuery, StatsGroupBy, MAX_LOG_PAGE};
use uuid::Uuid;

use crate::auth::{Caller, Principal};
use crate::views::{ErrorBody, LogPage, LogStats};
use crate::{ApiError, ApiQuery, AppState, ErrorCode};

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
        scope: None,
    })
}

/// The filters of the query string, narrowed to the caller's project: a project's keys and
/// people read the calls charged within it (docs/tenancy.md), the installation every call.
async fn scoped_query(
    state: &AppState,
    caller: &Principal,
    params: &HashMap<String, String>,
) -> Result<RequestLogQuery, ApiError> {
    caller.require_operator()?;
    let mut query = log_query(params)?;
    if let Some(project) = caller.confined_to() {
        query.scope = Some(crate::rest::spend::spend_scope(state, project).await?.0);
    }
    Ok(query)
}

/// The request log, newest first. Filters: `route`, `provider`, `model`, `status`,
/// `session_id`, `api_key`, `cache` (hit|miss), `since`, `until` (RFC 3339), `metadata.KEY`.
#[utoipa::path(get, path = "/v1/gateway/logs", params(("limit" = Option<u32>, Query, minimum = 1, maximum = 1000), ("cursor" = Option<String>, Query), ("route" = Option<String>, Query), ("status" = Option<String>, Query)), responses((status = 200, body = LogPage), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn logs(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
) -> Result<Json<LogPage>, ApiError> {
    let query = scoped_query(&state, &caller, &params).await?;
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
    let group_by = params.get("group_by").map_or("route", String::as_str);
    let grouping: StatsGroupBy = group_by.parse().map_err(query_error)?;
    let query = scoped_query(&state, &caller, &params).await?;
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

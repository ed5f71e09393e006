//! Replay over REST: a session's state at any seq, and forks from any seq.

use super::*;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AtQuery {
    /// Fold the journal up to this seq (default: the current state).
    #[param(minimum = 1)]
    at: Option<i64>,
}

/// `GET …/state?at=N` folds running at once in this process (eight concurrent folds
/// of an ~80 MB journal raised RSS by 270 MiB).
pub const CONCURRENT_FOLDS: usize = 2;

static FOLDS: std::sync::LazyLock<tokio::sync::Semaphore> =
    std::sync::LazyLock::new(|| tokio::sync::Semaphore::new(CONCURRENT_FOLDS));

#[utoipa::path(get, path = "/v1/sessions/{id}/state", params(("id" = Uuid, Path, description = "Session id"), AtQuery), responses((status = 200, body = StateView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 410, description = "The journal was compacted through the seq asked for", body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn state_at(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<AtQuery>,
) -> Result<Json<StateView>, ApiError> {
    caller
        .require_session_tree(state.store.as_ref(), id)
        .await?;
    let row = state.store.get_session(id).await?;
    let folded = match query.at {
        None => state.sessions.state(id).await?,
        Some(at) => {
            check_seq(at, row.last_seq)?;
            // A fold holds a session's state in memory while it reads the journal: at most
            // [`CONCURRENT_FOLDS`] at a time in this process, the others wait their turn.
            let _permit = FOLDS
                .acquire()
                .await
                .map_err(|_| ApiError::new(ErrorCode::Internal, "the fold limiter is closed"))?;
            stead_actors::replay::fold_until(state.store.as_ref(), id, at).await?
        }
    };
    Ok(Json(StateView {
        session_id: id,
        seq: folded.last_seq,
        status: folded.status(),
        state: folded,
    }))
}

pub(crate) fn check_seq(at: i64, last_seq: i64) -> Result<(), ApiError> {
    if at < 1 || at > last_seq {
        return Err(ApiError::new(
            ErrorCode::SeqOutOfRange,
            format!("`at` must be between 1 and the session's last seq ({last_seq})"),
        ));
    }
    Ok(())
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkOverrides {
    #[serde(default)]
    route: Option<String>,
    /// Another name for `route` (what `/v1/chat/completions` calls a route).
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    system_prompt: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Fork {
    /// Copy the journal up to this seq.
    #[serde(deserialize_with = "integer")]
    #[schema(minimum = 1)]
    at: i64,
    #[serde(default, deserialize_with = "object")]
    overrides: ForkOverrides,
}

/// A struct only from a JSON object (serde would also read one from an array).
pub(crate) fn object<'de, D: serde::Deserializer<'de>, T: serde::de::DeserializeOwned>(
    deserializer: D,
) -> Result<T, D::Error> {
    match Value::deserialize(deserializer)? {
        value @ Value::Object(_) => serde_json::from_value(value).map_err(serde::de::Error::custom),
        _ => Err(serde::de::Error::custom("expected a JSON object")),
    }
}

/// An integer, also when written as an integral float (`5.0`): JSON has one number type.
pub(crate) fn integer<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let number = serde_json::Number::deserialize(deserializer)?;
    if let Some(i) = number.as_i64() {
        return Ok(i);
    }
    match number.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
        _ => Err(serde::de::Error::custom(format!(
            "{number} is not an integer"
        ))),
    }
}

#[utoipa::path(post, path = "/v1/sessions/{id}/fork", params(("id" = Uuid, Path, description = "Session id")), request_body = Fork, responses((status = 201, body = Forked), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 410, description = "The journal was compacted through the seq asked for", body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn fork(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<Fork>,
) -> Result<Response, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    caller.require_operator()?; // a fork is a new session: a session token cannot mint one
    let source = state.store.get_session(id).await?;
    check_seq(body.at, source.last_seq)?;
    let route = match (body.overrides.route, body.overrides.model) {
        (Some(r), Some(m)) if r != m => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "`overrides.route` and `overrides.model` name different routes",
            ))
        }
        (r, m) => r.or(m),
    };
    if let Some(route) = &route {
        if !state.routes.contains(route) || !caller.may_use_route(route) {
            return Err(ApiError::new(
                ErrorCode::UnknownRoute,
                format!("no route is named `{route}`"),
            ));
        }
    }
    let overrides = Overrides {
        route,
        system_prompt: body.overrides.system_prompt,
    };
    let (row, last_seq) = stead_actors::replay::fork(
        state.store.as_ref(),
        &source,
        body.at,
        overrides,
        &billed(&caller),
    )
    .await?;
    // Activate it: whatever was in flight at `at` carries on in the fork (finished model and
    // tool calls are in the copied journal and are not run again).
    let folded = state.sessions.state(row.id).await?;
    let row = state.store.get_session(row.id).await?;
    let mut view = session_view(&row, &folded);
    view.row.last_seq = last_seq;
    let (token, token_expires_at) = state.auth.session_token(row.id, row.token_generation);
    let forked = Forked {
        view,
        token,
        token_expires_at,
    };
    Ok((StatusCode::CREATED, Json(forked)).into_response())
}

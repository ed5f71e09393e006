//! Reviewers' feedback on replies (docs/evals.md, "From production to dataset"): a thumbs up or
//! down on one `assistant_message` of a session, with a note and, for a bad reply, the reply
//! that was wanted. Whoever may read the session rates it (its token or an operator); operators
//! list every rating (`GET /v1/feedback`), and a rating becomes an evaluation case with
//! `POST /v1/datasets/{name}/cases {"feedback_id"}` (`rest::evals`). Ratings are not journal
//! events: they judge the session from outside and never change its replay.

use stead_persistence::evals::{FeedbackRow, Rating};

use super::*;

/// Longest note, in characters.
const MAX_NOTE: usize = 4_000;
/// Longest correction, in characters.
const MAX_CORRECTION: usize = 16_000;

/// A reviewer's rating.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FeedbackRating {
    Up,
    Down,
}

impl From<FeedbackRating> for Rating {
    fn from(rating: FeedbackRating) -> Self {
        match rating {
            FeedbackRating::Up => Rating::Up,
            FeedbackRating::Down => Rating::Down,
        }
    }
}

impl From<Rating> for FeedbackRating {
    fn from(rating: Rating) -> Self {
        match rating {
            Rating::Up => FeedbackRating::Up,
            Rating::Down => FeedbackRating::Down,
        }
    }
}

/// One rating of a reply.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct FeedbackView {
    pub id: Uuid,
    pub session_id: Uuid,
    /// The seq of the rated `assistant_message`.
    pub seq: i64,
    pub rating: FeedbackRating,
    pub note: String,
    /// The reply that was wanted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correction: Option<String>,
    /// Who rated it: `local`, `api_key:{fingerprint}`, or `session_token:{id}`.
    pub created_by: String,
    pub created_at: String,
}

impl From<FeedbackRow> for FeedbackView {
    fn from(row: FeedbackRow) -> Self {
        FeedbackView {
            id: row.id,
            session_id: row.session_id,
            seq: row.seq,
            rating: row.rating.into(),
            note: row.note,
            correction: row.correction,
            created_by: row.created_by,
            created_at: crate::wire::rfc3339(row.created_at),
        }
    }
}

#[derive(Debug, serde::Serialize, ToSchema)]
pub struct FeedbackList {
    pub feedback: Vec<FeedbackView>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewFeedback {
    /// The seq of the `assistant_message` rated.
    #[schema(minimum = 1)]
    seq: i64,
    rating: FeedbackRating,
    /// Why (at most 4,000 characters).
    #[serde(default)]
    note: String,
    /// The reply that was wanted (at most 16,000 characters); a bad rating with one can become
    /// an evaluation case graded against it.
    #[serde(default)]
    correction: Option<String>,
}

#[utoipa::path(post, path = "/v1/sessions/{id}/feedback", params(("id" = Uuid, Path, description = "Session id")), request_body = NewFeedback, responses((status = 201, body = FeedbackView), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn add_feedback(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<NewFeedback>,
) -> Result<(StatusCode, Json<FeedbackView>), ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    state.store.get_session(id).await?;
    if body.note.chars().count() > MAX_NOTE {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("a note is at most {MAX_NOTE} characters"),
        ));
    }
    let correction = body.correction.filter(|c| !c.trim().is_empty());
    if correction
        .as_ref()
        .is_some_and(|c| c.chars().count() > MAX_CORRECTION)
    {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("a correction is at most {MAX_CORRECTION} characters"),
        ));
    }
    let rated = if body.seq >= 1 {
        state.store.read(id, body.seq - 1, 1).await?
    } else {
        Vec::new()
    };
    if !rated
        .first()
        .is_some_and(|e| e.seq == body.seq && e.kind == "assistant_message")
    {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!(
                "seq {} is not a reply (`assistant_message`) of the session",
                body.seq
            ),
        ));
    }
    let row = FeedbackRow {
        id: Uuid::now_v7(),
        session_id: id,
        seq: body.seq,
        rating: body.rating.into(),
        note: body.note,
        correction,
        created_by: caller.name().to_string(),
        created_at: chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 6),
    };
    state.store.add_feedback(&row).await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

#[utoipa::path(get, path = "/v1/sessions/{id}/feedback", params(("id" = Uuid, Path, description = "Session id")), responses((status = 200, body = FeedbackList), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn session_feedback(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<FeedbackList>, ApiError> {
    caller.require_session(state.store.as_ref(), id).await?;
    state.store.get_session(id).await?;
    let rows = state
        .store
        .list_feedback(caller.scope(), Some(id), None, stead_persistence::MAX_PAGE)
        .await?;
    Ok(Json(FeedbackList {
        feedback: rows.into_iter().map(Into::into).collect(),
    }))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FeedbackQuery {
    #[param(inline)]
    rating: Option<FeedbackRating>,
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/feedback", params(FeedbackQuery), responses((status = 200, body = FeedbackList), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody)))]
pub async fn list_feedback(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<FeedbackQuery>,
) -> Result<Json<FeedbackList>, ApiError> {
    caller.require_operator()?;
    let limit = super::page_limit(query.limit, 100, stead_persistence::MAX_PAGE)?;
    let rows = state
        .store
        .list_feedback(caller.scope(), None, query.rating.map(Into::into), limit)
        .await?;
    Ok(Json(FeedbackList {
        feedback: rows.into_iter().map(Into::into).collect(),
    }))
}

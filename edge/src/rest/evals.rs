//! Evaluations over REST (docs/evals.md): datasets, cases from recorded sessions, runs and
//! comparisons — the same engine as `stead eval` (`stead_evals::Runner`). Datasets and runs
//! are their caller's project's (the installation's keys: the default project's); another
//! project's answer 404 as missing ones do (docs/tenancy.md).
//! A run answers 202 with its id at once and goes on in the background; `GET /v1/evals/{id}`
//! shows its progress and each case's result as it ends.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use stead_evals::compare::{compare, Comparison};
use stead_evals::run::{ApprovalRule, CaseResult, RunSettings};
use stead_evals::{Case, Expectation, ToolMode};
use stead_persistence::evals::{DatasetRow, EvalRunRow, EvalStatus, FeedbackRow};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::Caller;
use crate::views::ErrorBody;
use crate::{ApiError, ApiJson, ApiPath, ApiQuery, AppState, ErrorCode};

fn runner(state: &AppState) -> Result<&stead_evals::Runner, ApiError> {
    state
        .evals
        .as_deref()
        .ok_or_else(|| ApiError::not_found("evaluations are not served here"))
}

/// A store error of the evaluation endpoints: a missing dataset or run, a taken name.
fn store_error(error: stead_persistence::Error, what: ErrorCode) -> ApiError {
    match error {
        stead_persistence::Error::NotFound(message) => ApiError::new(what, message),
        stead_persistence::Error::Exists(message) => {
            ApiError::new(ErrorCode::DatasetExists, message)
        }
        other => other.into(),
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DatasetView {
    pub name: String,
    pub version: i64,
    pub cases: i64,
    pub created_at: String,
    pub updated_at: String,
}

impl From<DatasetRow> for DatasetView {
    fn from(row: DatasetRow) -> Self {
        DatasetView {
            name: row.name,
            version: row.version,
            cases: row.cases,
            created_at: crate::wire::rfc3339(row.created_at),
            updated_at: crate::wire::rfc3339(row.updated_at),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DatasetList {
    pub datasets: Vec<DatasetView>,
}

/// A dataset with its cases.
#[derive(Debug, Serialize, ToSchema)]
pub struct DatasetCases {
    #[serde(flatten)]
    pub dataset: DatasetView,
    /// The cases (docs/evals.md, "JSONL": a case's shape).
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<Case>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewDataset {
    #[schema(pattern = "^[A-Za-z0-9._-]{1,100}$")]
    name: String,
}

/// 1–100 letters, digits, `.`, `_` and `-`.
fn valid_name(name: &str) -> Result<(), ApiError> {
    super::valid_name(name, 100, "dataset")
}

#[utoipa::path(post, path = "/v1/datasets", request_body = NewDataset, responses((status = 201, body = DatasetView), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, description = "Evaluations are not served here", body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_dataset(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(body): ApiJson<NewDataset>,
) -> Result<(StatusCode, Json<DatasetView>), ApiError> {
    caller.require_operator()?;
    runner(&state)?;
    valid_name(&body.name)?;
    let row = state
        .store
        .create_dataset(caller.project(), &body.name)
        .await
        .map_err(|e| store_error(e, ErrorCode::DatasetNotFound))?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

#[utoipa::path(get, path = "/v1/datasets", responses((status = 200, body = DatasetList), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, description = "Evaluations are not served here", body = ErrorBody)))]
pub async fn list_datasets(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<DatasetList>, ApiError> {
    caller.require_operator()?;
    runner(&state)?;
    let rows = state.store.list_datasets(caller.project()).await?;
    Ok(Json(DatasetList {
        datasets: rows.into_iter().map(Into::into).collect(),
    }))
}

#[utoipa::path(get, path = "/v1/datasets/{name}", params(("name" = String, Path, description = "Dataset name")), responses((status = 200, body = DatasetCases), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_dataset(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<DatasetCases>, ApiError> {
    caller.require_operator()?;
    runner(&state)?;
    let row = state
        .store
        .get_dataset(caller.project(), &name)
        .await
        .map_err(|e| store_error(e, ErrorCode::DatasetNotFound))?;
    let mut items = Vec::new();
    for case in state.store.dataset_cases(caller.project(), &name).await? {
        items.push(
            serde_json::from_value(case.body)
                .map_err(|e| ApiError::internal("a stored case does not read", e))?,
        );
    }
    Ok(Json(DatasetCases {
        dataset: row.into(),
        items,
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewCase {
    /// The recorded session (or `feedback_id`).
    #[serde(default)]
    session_id: Option<Uuid>,
    #[serde(default)]
    at_seq: Option<i64>,
    /// A reviewer's rating: the case is the user message whose turn the rated reply ended.
    #[serde(default)]
    feedback_id: Option<Uuid>,
    /// Expectations (docs/evals.md, "Expectations"), each an object with its `type`.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    expect: Vec<Expectation>,
}

/// The expectation a reviewer's correction makes: a judge asked whether the reply agrees
/// with the wanted one (the run's `judge_route` scores it).
fn correction_rubric(note: &str, correction: &str) -> Expectation {
    let note = if note.trim().is_empty() {
        String::new()
    } else {
        format!(" (their note: {:?})", note.trim())
    };
    Expectation::Judge {
        rubric: format!(
            "A reviewer marked the recorded reply to this message as bad{note}. The reply they \
             wanted: {correction:?}. Pass only if the reply agrees with the wanted one in \
             substance (the wording may differ)."
        ),
        route: None,
    }
}

/// Where a case starts and what it expects, from a rating: the last user message before the
/// rated reply; a bad rating's correction (unless `expect` is given) is graded by a judge, a
/// good rating without `expect` keeps the recording as the baseline.
fn from_feedback(
    row: &FeedbackRow,
    events: &[stead_persistence::Event],
    expect: Vec<Expectation>,
) -> Result<(i64, Vec<Expectation>), ApiError> {
    let at = events
        .iter()
        .rev()
        .find(|e| e.seq < row.seq && e.kind == "user_message")
        .map(|e| e.seq)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                "no user message before the rated reply (the journal was compacted?)",
            )
        })?;
    let expect = match (expect.is_empty(), row.rating, &row.correction) {
        (false, ..) => expect,
        (true, stead_persistence::evals::Rating::Down, Some(correction)) => {
            vec![correction_rubric(&row.note, correction)]
        }
        (true, stead_persistence::evals::Rating::Down, None) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "this rating has no correction: give the case's `expect` (a bad reply cannot \
                 be its own baseline)",
            ))
        }
        (true, stead_persistence::evals::Rating::Up, _) => Vec::new(),
    };
    Ok((at, expect))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CaseAdded {
    pub id: Uuid,
    pub name: String,
    pub dataset: DatasetView,
}

/// A case's body naming a session or a rating that does not exist: 422, since the dataset the
/// path names does exist (a 404 would say it does not).
fn unknown_reference(what: &str, id: Uuid) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, format!("no {what} {id}"))
}

#[utoipa::path(post, path = "/v1/datasets/{name}/cases", params(("name" = String, Path, description = "Dataset name")), request_body = NewCase, responses((status = 201, body = CaseAdded), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn add_case(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<NewCase>,
) -> Result<(StatusCode, Json<CaseAdded>), ApiError> {
    caller.require_operator()?;
    runner(&state)?;
    state
        .store
        .get_dataset(caller.project(), &name)
        .await
        .map_err(|e| store_error(e, ErrorCode::DatasetNotFound))?;
    let (session_id, feedback) = match (body.session_id, body.feedback_id) {
        (Some(session), None) => (session, None),
        (None, Some(feedback)) if body.at_seq.is_none() => {
            let row = state
                .store
                .get_feedback(feedback)
                .await
                .map_err(|e| match e {
                    stead_persistence::Error::NotFound(_) => {
                        unknown_reference("feedback", feedback)
                    }
                    other => other.into(),
                })?;
            (row.session_id, Some(row))
        }
        _ => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "give `session_id` (and `at_seq`) or `feedback_id`, not both",
            ))
        }
    };
    let session = state
        .store
        .get_session(session_id)
        .await
        .map_err(|e| match e {
            stead_persistence::Error::SessionNotFound(_) => {
                unknown_reference("session", session_id)
            }
            other => other.into(),
        })?;
    // Another project's session (or rating) reads exactly as a missing one.
    if caller
        .confined_to()
        .is_some_and(|project| project != session.project_id)
    {
        return Err(match &feedback {
            Some(row) => unknown_reference("feedback", row.id),
            None => unknown_reference("session", session_id),
        });
    }
    let events = stead_actors::replay::read_all(state.store.as_ref(), session.id, 0).await?;
    let (at_seq, expect) = match &feedback {
        Some(row) => {
            let (at, expect) = from_feedback(row, &events, body.expect)?;
            (Some(at), expect)
        }
        None => (body.at_seq, body.expect),
    };
    let case = Case::from_journal(&session.agent, session.id, &events, at_seq, expect)
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.to_string()))?;
    let value = serde_json::to_value(&case)
        .map_err(|e| ApiError::internal("the case does not serialize", e))?;
    let row = state
        .store
        .add_cases(caller.project(), &name, &[(case.id, value)])
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CaseAdded {
            id: case.id,
            name: case.name,
            dataset: row.into(),
        }),
    ))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewRun {
    dataset: String,
    #[serde(default)]
    route: Option<String>,
    #[serde(default)]
    system_prompt: Option<String>,
    /// `replay` (default) or `live`.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    tools: Option<ToolMode>,
    #[serde(default)]
    live_idempotent: bool,
    #[serde(default)]
    side_effects: bool,
    /// How an approval no recording covers is decided: `reject` (default), `approve`, `fail`.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    approvals: Option<ApprovalRule>,
    #[serde(default)]
    judge_route: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 64)]
    concurrency: Option<usize>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunStarted {
    pub id: Uuid,
}

#[utoipa::path(post, path = "/v1/evals", request_body = NewRun, responses((status = 202, description = "The run goes on in this process", body = RunStarted), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn start_run(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(body): ApiJson<NewRun>,
) -> Result<(StatusCode, Json<RunStarted>), ApiError> {
    caller.require_operator()?;
    let runner = runner(&state)?.clone();
    for route in [&body.route, &body.judge_route].into_iter().flatten() {
        if !state.routes.contains(route) || !caller.may_use_route(route) {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("no route is named `{route}`"),
            ));
        }
    }
    let settings = RunSettings {
        route: body.route,
        system_prompt: body.system_prompt,
        tools: body.tools.unwrap_or_default(),
        live_idempotent: body.live_idempotent,
        side_effects: body.side_effects,
        approvals: body.approvals.unwrap_or_default(),
        judge_route: body.judge_route,
        concurrency: body.concurrency.unwrap_or(1),
        ..Default::default()
    };
    let (run, cases) = runner
        .create(caller.project(), &body.dataset, &settings)
        .await
        .map_err(|e| match e {
            stead_evals::RunError::Store(e) => store_error(e, ErrorCode::DatasetNotFound),
            other => ApiError::new(ErrorCode::InvalidRequest, other.to_string()),
        })?;
    let id = run.id;
    // The run's sessions are charged to whoever started it, as their own sessions would be.
    let payer = super::billed(&caller);
    tokio::spawn(async move {
        if let Err(error) = runner
            .execute(&run, cases, &settings, &payer, |_, _| {})
            .await
        {
            tracing::warn!(run = %run.id, %error, "an evaluation run failed");
        }
    });
    Ok((StatusCode::ACCEPTED, Json(RunStarted { id })))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunSummary {
    pub total: i64,
    pub done: i64,
    pub passed: i64,
    pub failed: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunView {
    pub id: Uuid,
    pub dataset: String,
    pub dataset_version: i64,
    /// `running`, `finished` or `failed`.
    #[schema(value_type = String)]
    pub status: EvalStatus,
    #[schema(value_type = Object)]
    pub settings: serde_json::Value,
    pub summary: RunSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Each case's result (one run, not the list).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub cases: Option<Vec<CaseResult>>,
}

impl RunView {
    fn of(row: EvalRunRow, cases: Option<Vec<CaseResult>>) -> Self {
        RunView {
            id: row.id,
            dataset: row.dataset,
            dataset_version: row.dataset_version,
            status: row.status,
            settings: row.settings,
            summary: RunSummary {
                total: row.total,
                done: row.done,
                passed: row.passed,
                failed: row.done - row.passed,
            },
            error: row.error,
            created_at: crate::wire::rfc3339(row.created_at),
            finished_at: row.finished_at.map(crate::wire::rfc3339),
            cases,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RunQuery {
    #[serde(default)]
    dataset: Option<String>,
}

#[utoipa::path(get, path = "/v1/evals", params(RunQuery), responses((status = 200, body = RunList), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, description = "Evaluations are not served here", body = ErrorBody)))]
pub async fn list_runs(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<RunQuery>,
) -> Result<Json<RunList>, ApiError> {
    caller.require_operator()?;
    runner(&state)?;
    let rows = state
        .store
        .list_eval_runs(caller.project(), query.dataset.as_deref(), 100)
        .await?;
    Ok(Json(RunList {
        runs: rows.into_iter().map(|r| RunView::of(r, None)).collect(),
    }))
}

/// A run with its results; another project's run answers exactly as a missing one.
async fn results(
    state: &AppState,
    caller: &crate::Principal,
    id: Uuid,
) -> Result<(EvalRunRow, Vec<CaseResult>), ApiError> {
    let row = state
        .store
        .get_eval_run(id)
        .await
        .and_then(|row| match caller.confined_to() {
            Some(project) if project != row.project_id => Err(stead_persistence::Error::NotFound(
                format!("no evaluation run {id}"),
            )),
            _ => Ok(row),
        })
        .map_err(|e| store_error(e, ErrorCode::EvalNotFound))?;
    let mut cases = Vec::new();
    for result in state.store.eval_results(id).await? {
        cases.push(
            serde_json::from_value(result.body)
                .map_err(|e| ApiError::internal("a stored result does not read", e))?,
        );
    }
    Ok((row, cases))
}

#[utoipa::path(get, path = "/v1/evals/{id}", params(("id" = Uuid, Path, description = "Run id")), responses((status = 200, body = RunView), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_run(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<RunView>, ApiError> {
    caller.require_operator()?;
    runner(&state)?;
    let (row, cases) = results(&state, &caller, id).await?;
    Ok(Json(RunView::of(row, Some(cases))))
}

#[utoipa::path(get, path = "/v1/evals/{a}/compare/{b}", params(("a" = Uuid, Path, description = "Run A"), ("b" = Uuid, Path, description = "Run B")), responses((status = 200, description = "Both runs' figures and every case with how it flipped, regressions first (docs/evals.md)", body = Object), (status = 400, body = ErrorBody), (status = 401, description = "Missing or invalid credentials", body = ErrorBody), (status = 403, description = "Not allowed for this credential", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn compare_runs(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((a, b)): ApiPath<(Uuid, Uuid)>,
) -> Result<Json<Comparison>, ApiError> {
    caller.require_operator()?;
    runner(&state)?;
    let (_, first) = results(&state, &caller, a).await?;
    let (_, second) = results(&state, &caller, b).await?;
    Ok(Json(compare((a, &first), (b, &second))))
}

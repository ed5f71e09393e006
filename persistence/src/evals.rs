//! The rows of evaluation from the journal (docs/evals.md): datasets, their cases, runs and
//! each case's result, and reviewers' feedback on replies. Cases and results are stored whole as JSON; `stead-evals` owns their
//! shape.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DatasetRow {
    pub name: String,
    /// Moves on every change of the dataset's cases.
    pub version: i64,
    pub cases: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseRow {
    pub id: Uuid,
    pub position: i64,
    pub body: Value,
}

/// How a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalStatus {
    Running,
    Finished,
    /// The run stopped before every case had a result (an error, or the process ended).
    Failed,
}

impl EvalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EvalStatus::Running => "running",
            EvalStatus::Finished => "finished",
            EvalStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "running" => Some(EvalStatus::Running),
            "finished" => Some(EvalStatus::Finished),
            "failed" => Some(EvalStatus::Failed),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalRunRow {
    pub id: Uuid,
    /// The project whose dataset it ran; its sessions are that project's too.
    pub project_id: Uuid,
    pub dataset: String,
    pub dataset_version: i64,
    pub settings: Value,
    pub status: EvalStatus,
    pub total: i64,
    pub done: i64,
    pub passed: i64,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalResultRow {
    pub case_id: Uuid,
    pub position: i64,
    pub passed: bool,
    pub body: Value,
}

/// A reviewer's rating of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rating {
    Up,
    Down,
}

impl Rating {
    pub fn as_str(self) -> &'static str {
        match self {
            Rating::Up => "up",
            Rating::Down => "down",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "up" => Some(Rating::Up),
            "down" => Some(Rating::Down),
            _ => None,
        }
    }
}

/// A rating of one `assistant_message` (its `seq`) of a session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FeedbackRow {
    pub id: Uuid,
    pub session_id: Uuid,
    pub seq: i64,
    pub rating: Rating,
    pub note: String,
    /// The reply that was wanted (a bad rating's correction).
    pub correction: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

//! The schedules' due index (docs/schedules.md): one row per pending schedule, saying when its
//! next occurrence is due. A session's schedules are decided and journaled by its actor; their
//! rows are wake-up hints the actor writes (a row that says "due" when the journal says
//! otherwise wakes the session for nothing, which it corrects). An agent's schedules have no
//! journal: their rows are the record, advanced by compare-and-set so each occurrence is
//! claimed once.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

/// Whose schedule a row is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScheduleOwner {
    /// Delivers its message to this session.
    Session(Uuid),
    /// Each occurrence starts a new session of this agent in this project: a project's
    /// schedule keys are its own (docs/tenancy.md).
    Agent { project: Uuid, name: String },
}

impl ScheduleOwner {
    /// The default project's (the installation's) schedule of agent `name`.
    pub fn installation_agent(name: impl Into<String>) -> Self {
        ScheduleOwner::Agent {
            project: crate::DEFAULT_PROJECT,
            name: name.into(),
        }
    }

    /// The `owner` column, which with the key names the row: the session's id;
    /// `agent:{name}` for the default project's agents (as before projects);
    /// `agent:{project id}:{name}` for another project's.
    pub fn column(&self) -> String {
        match self {
            ScheduleOwner::Session(id) => id.to_string(),
            ScheduleOwner::Agent { project, name } if *project == crate::DEFAULT_PROJECT => {
                format!("agent:{name}")
            }
            ScheduleOwner::Agent { project, name } => format!("agent:{project}:{name}"),
        }
    }

    pub fn session_id(&self) -> Option<Uuid> {
        match self {
            ScheduleOwner::Session(id) => Some(*id),
            ScheduleOwner::Agent { .. } => None,
        }
    }

    /// An agent's schedule's project (a session's follows its session).
    pub fn project(&self) -> Option<Uuid> {
        match self {
            ScheduleOwner::Session(_) => None,
            ScheduleOwner::Agent { project, .. } => Some(*project),
        }
    }
}

/// One row of the due index.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRow {
    pub owner: ScheduleOwner,
    pub key: String,
    /// The session's agent, or the agent an agent's schedule starts.
    pub agent: String,
    /// The schedule's definition as `schedule_created` records it.
    pub definition: Value,
    pub next_due_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Filter and page of [`crate::Schedules::list_schedules`].
#[derive(Debug, Clone, Default)]
pub struct ScheduleQuery {
    /// Whose schedules: the installation's, or one project's (its sessions' and its agents').
    pub scope: crate::Scope,
    /// Only rows due at or before this instant.
    pub due_before: Option<DateTime<Utc>>,
    pub session_id: Option<Uuid>,
    /// Only an agent's own schedules (not its sessions'), of every project in scope.
    pub agent: Option<String>,
    /// Page size, clamped to `1..=MAX_PAGE`.
    pub limit: u32,
}

//! The rows of projects and their virtual keys (docs/design/tenancy-notes.md): a project owns
//! resources; a key belongs to one project, has a role, and is kept as a digest of its secret.
//! Which caller a key makes, and what it may do, is the HTTP edge's.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

/// The project every row belongs to unless it names another: all data from before projects.
pub const DEFAULT_PROJECT: Uuid = Uuid::nil();

/// Whose rows a read sees: the whole installation's (the config file's keys, loopback) or one
/// project's. A row of another project is treated exactly as a missing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    #[default]
    Installation,
    Project(Uuid),
}

impl Scope {
    /// Whether a row of `project` is visible.
    pub fn admits(self, project: Uuid) -> bool {
        match self {
            Scope::Installation => true,
            Scope::Project(own) => own == project,
        }
    }

    /// The one project seen, if the scope is a project's.
    pub fn project(self) -> Option<Uuid> {
        match self {
            Scope::Installation => None,
            Scope::Project(own) => Some(own),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProjectRow {
    pub id: Uuid,
    pub name: String,
    pub settings: Value,
    pub created_at: DateTime<Utc>,
}

/// A budget: USD per period (`None`: the budget never starts again).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub usd: f64,
    pub period_secs: Option<i64>,
}

impl ProjectRow {
    /// Its settings with `budget` in place of the one they hold (`None`: no budget).
    pub fn settings_with_budget(&self, budget: Option<Budget>) -> Value {
        let mut settings = match &self.settings {
            Value::Object(map) => map.clone(),
            _ => serde_json::Map::new(),
        };
        settings.insert(
            "budget_usd".into(),
            budget.map_or(Value::Null, |b| Value::from(b.usd)),
        );
        settings.insert(
            "budget_period_secs".into(),
            budget
                .and_then(|b| b.period_secs)
                .map_or(Value::Null, Value::from),
        );
        Value::Object(settings)
    }

    /// The project's budget, from its settings (`budget_usd`, `budget_period_secs`).
    pub fn budget(&self) -> Option<Budget> {
        Some(Budget {
            usd: self.settings.get("budget_usd")?.as_f64()?,
            period_secs: self
                .settings
                .get("budget_period_secs")
                .and_then(Value::as_i64),
        })
    }

    /// The installation's agents the project may use (`None`: all of them), from its settings.
    pub fn allowed_agents(&self) -> Option<Vec<String>> {
        self.list("agents")
    }

    /// The installation's routes the project may use (`None`: all of them).
    pub fn allowed_routes(&self) -> Option<Vec<String>> {
        self.list("routes")
    }

    fn list(&self, name: &str) -> Option<Vec<String>> {
        let items = self.settings.get(name)?.as_array()?;
        Some(
            items
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
        )
    }

    /// Its settings with the list `name` (`agents`, `routes`) set (`None`: everything allowed).
    pub fn settings_with_list(&self, name: &str, list: Option<&[String]>) -> Value {
        let mut settings = match &self.settings {
            Value::Object(map) => map.clone(),
            _ => serde_json::Map::new(),
        };
        settings.insert(
            name.into(),
            list.map_or(Value::Null, |items| Value::from(items.to_vec())),
        );
        Value::Object(settings)
    }
}

/// What a virtual key may do in its project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyRole {
    /// The project's settings, keys and budgets, and what `member` may do.
    Admin,
    /// Sessions, approvals, knowledge and datasets of the project.
    Member,
    /// Reads only.
    Viewer,
    /// The AI gateway's endpoints only.
    Inference,
}

impl KeyRole {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyRole::Admin => "admin",
            KeyRole::Member => "member",
            KeyRole::Viewer => "viewer",
            KeyRole::Inference => "inference",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            KeyRole::Admin,
            KeyRole::Member,
            KeyRole::Viewer,
            KeyRole::Inference,
        ]
        .into_iter()
        .find(|r| r.as_str() == text)
    }
}

/// A virtual key as stored: never its secret, only the secret's SHA-256 (`digest`, lowercase
/// hex) and its first characters (`prefix`, for lists).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyRow {
    pub id: Uuid,
    pub project_id: Uuid,
    pub name: String,
    pub role: KeyRole,
    pub prefix: String,
    #[serde(skip)]
    pub digest: String,
    /// The routes it may use (`None`: every route its project allows).
    pub routes: Option<Vec<String>>,
    pub budget_usd: Option<f64>,
    pub budget_period_secs: Option<i64>,
    pub rpm: Option<i64>,
    pub tpm: Option<i64>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// The key this one replaced (a rotation).
    pub rotated_from: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl KeyRow {
    /// The key's own budget, if it has one.
    pub fn budget(&self) -> Option<Budget> {
        Some(Budget {
            usd: self.budget_usd?,
            period_secs: self.budget_period_secs,
        })
    }

    /// Whether the key may be used at `now`: not revoked, not expired.
    pub fn live_at(&self, now: DateTime<Utc>) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| now < at)
    }
}

//! Schedules that target an agent (docs/schedules.md, "Schedules that start sessions"): each
//! occurrence starts a new session of the agent whose first user message is the schedule's.
//! They have no journal of their own: the due-index row is the record, and an occurrence is
//! done in steps that are each idempotent — the session's id is derived from the occurrence,
//! its message carries a `client_id` derived from it, and the row is advanced by
//! compare-and-set last — so a crash or a second node repeats a step harmlessly, and each
//! occurrence starts one session with one message. This module holds the pure parts: the
//! record, the create decision and the occurrence's identity.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use stead_persistence::{ScheduleOwner, ScheduleRow};
use uuid::Uuid;

use crate::decide::Refusal;
use crate::rules::AgentRules;
use crate::schedules::timing::Due;
use crate::schedules::{check_definition, ScheduleDef};

/// An agent's schedule as its row's `definition` holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSchedule {
    pub schedule: ScheduleDef,
    pub created_at: DateTime<Utc>,
    /// Who created it: the sessions it starts are billed to them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

impl AgentSchedule {
    /// The row's record, if it is one this version reads.
    pub fn from_row(row: &ScheduleRow) -> Option<AgentSchedule> {
        serde_json::from_value(row.definition.clone()).ok()
    }

    /// The timing, from the creation instant.
    pub fn due(&self) -> Option<Due> {
        Due::new(self.schedule.timing().ok()?, self.created_at, 0).ok()
    }

    /// The row for `project`'s schedule `key` of `agent`, due at `next_due_at`.
    pub fn row(
        &self,
        project: Uuid,
        agent: &str,
        key: &str,
        next_due_at: DateTime<Utc>,
    ) -> ScheduleRow {
        ScheduleRow {
            owner: ScheduleOwner::Agent {
                project,
                name: agent.to_string(),
            },
            key: key.to_string(),
            agent: agent.to_string(),
            definition: serde_json::to_value(self).unwrap_or_default(),
            next_due_at,
            updated_at: next_due_at,
        }
    }
}

/// Decides a create of `agent`'s schedule `key` at `now`, given the row that holds the key (if
/// any) and how many other schedules the agent holds: the row to write, or why not — the same
/// refusals as a session's schedule ([`Refusal::ScheduleExists`] when the same definition is
/// there already).
#[allow(clippy::too_many_arguments)]
pub fn plan_create(
    project: Uuid,
    agent: &str,
    key: &str,
    schedule: ScheduleDef,
    replace: bool,
    principal: Option<String>,
    existing: Option<&AgentSchedule>,
    others: usize,
    rules: &AgentRules,
    now: DateTime<Utc>,
) -> Result<ScheduleRow, Refusal> {
    let limits = rules.schedules;
    let due = check_definition(key, &schedule, rules, now)?;
    match existing {
        Some(existing) if existing.schedule == schedule => return Err(Refusal::ScheduleExists),
        Some(_) if !replace => return Err(Refusal::ScheduleConflict),
        _ => {}
    }
    if others >= limits.max_per_session {
        return Err(Refusal::TooManySchedules(limits.max_per_session));
    }
    let next = due.next_after(now).ok_or_else(|| {
        Refusal::InvalidSchedule("the schedule has no occurrence after now".into())
    })?;
    let record = AgentSchedule {
        schedule,
        created_at: now,
        principal,
    };
    Ok(record.row(project, agent, key, next))
}

/// The id of the session an occurrence starts: a UUIDv8 from SHA-256 of the schedule's owner
/// (its project, when not the default one, and its agent), the key, the schedule's creation
/// instant and the occurrence's due time. Every node and every retry computes the same id, so
/// the occurrence's session is created once; a schedule redefined under the same key starts
/// its own sessions.
pub fn occurrence_session(
    owner: &ScheduleOwner,
    key: &str,
    created_at: DateTime<Utc>,
    due_at: DateTime<Utc>,
) -> Uuid {
    // `agent:{name}` for the default project, as before projects: ids stay what they were.
    let owner = owner.column();
    let owner = owner.strip_prefix("agent:").unwrap_or(&owner);
    let name = format!(
        "stead:agent-schedule\n{owner}\n{key}\n{}\n{}",
        created_at.timestamp_micros(),
        due_at.timestamp_micros()
    );
    derived_id(&name)
}

/// A UUIDv8 from SHA-256 of `name`: the same on every node and every retry.
pub fn derived_id(name: &str) -> Uuid {
    let digest = Sha256::digest(name.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// A due-index row that wakes `session` now (a one-shot wake-up: a child's start or end, a
/// parent's cancel), with `definition` saying why.
pub fn wake_now(
    session: Uuid,
    key: String,
    agent: &str,
    definition: serde_json::Value,
) -> ScheduleRow {
    let now = Utc::now();
    ScheduleRow {
        owner: ScheduleOwner::Session(session),
        key,
        agent: agent.to_string(),
        definition,
        next_due_at: now,
        updated_at: now,
    }
}

/// The `client_id` of an occurrence's message: a retry of it is refused as a duplicate.
pub fn occurrence_client_id(key: &str, due_at: DateTime<Utc>) -> String {
    format!("schedule:{key}:{}", due_at.to_rfc3339())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedules::{CatchUp, ScheduleMessage};

    fn t(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn every(secs: u64) -> ScheduleDef {
        ScheduleDef {
            at: None,
            delay_secs: None,
            cron: None,
            tz: None,
            every_secs: Some(secs),
            message: ScheduleMessage::text("report"),
            catch_up: CatchUp::One,
        }
    }

    #[test]
    fn creating_is_idempotent_by_key_and_occurrences_have_fixed_identities() {
        let now = t("2026-12-03T10:00:00Z");
        let limits = AgentRules {
            route: "default".into(),
            max_steps: 1,
            tools: Default::default(),
            approval_timeout: None,
            dynamic: Vec::new(),
            message_mode: Default::default(),
            schedules: Default::default(),
            callbacks: Default::default(),
            delegation: Default::default(),
            context: Default::default(),
        };
        let limits = &limits;
        let row = plan_create(
            stead_persistence::DEFAULT_PROJECT,
            "ops",
            "hourly",
            every(3600),
            false,
            None,
            None,
            0,
            limits,
            now,
        )
        .unwrap();
        assert_eq!(row.owner, ScheduleOwner::installation_agent("ops"));
        assert_eq!(row.next_due_at, t("2026-12-03T11:00:00Z"));
        let record = AgentSchedule::from_row(&row).unwrap();
        assert_eq!(record.created_at, now);
        let later = t("2026-12-03T10:30:00Z");
        let again = plan_create(
            stead_persistence::DEFAULT_PROJECT,
            "ops",
            "hourly",
            every(3600),
            false,
            None,
            Some(&record),
            0,
            limits,
            later,
        );
        assert_eq!(again, Err(Refusal::ScheduleExists));
        let other = plan_create(
            stead_persistence::DEFAULT_PROJECT,
            "ops",
            "hourly",
            every(60),
            false,
            None,
            Some(&record),
            0,
            limits,
            later,
        );
        assert_eq!(other, Err(Refusal::ScheduleConflict));
        assert!(plan_create(
            stead_persistence::DEFAULT_PROJECT,
            "ops",
            "hourly",
            every(60),
            true,
            None,
            Some(&record),
            0,
            limits,
            later
        )
        .is_ok());
        let full = plan_create(
            stead_persistence::DEFAULT_PROJECT,
            "ops",
            "x",
            every(60),
            false,
            None,
            None,
            100,
            limits,
            later,
        );
        assert_eq!(full, Err(Refusal::TooManySchedules(100)));
        assert!(matches!(
            plan_create(
                stead_persistence::DEFAULT_PROJECT,
                "ops",
                "bad key",
                every(60),
                false,
                None,
                None,
                0,
                limits,
                later
            ),
            Err(Refusal::InvalidSchedule(_))
        ));

        let due = t("2026-12-03T11:00:00Z");
        let id = occurrence_session(
            &ScheduleOwner::installation_agent("ops"),
            "hourly",
            now,
            due,
        );
        assert_eq!(
            id,
            occurrence_session(
                &ScheduleOwner::installation_agent("ops"),
                "hourly",
                now,
                due
            )
        );
        assert_ne!(
            id,
            occurrence_session(
                &ScheduleOwner::installation_agent("ops"),
                "hourly",
                now,
                t("2026-12-03T12:00:00Z")
            )
        );
        assert_ne!(
            id,
            occurrence_session(
                &ScheduleOwner::installation_agent("ops"),
                "hourly",
                later,
                due
            )
        );
        assert_ne!(
            id,
            occurrence_session(
                &ScheduleOwner::installation_agent("billing"),
                "hourly",
                now,
                due
            )
        );
        // Another project's schedule of the same agent and key starts other sessions.
        let theirs = ScheduleOwner::Agent {
            project: Uuid::now_v7(),
            name: "ops".into(),
        };
        assert_ne!(id, occurrence_session(&theirs, "hourly", now, due));
        assert_eq!(id.get_version_num(), 8);
    }
}

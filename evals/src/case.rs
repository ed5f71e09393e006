//! A case: where a recorded session stood before one of its user messages (the journal up to
//! it, carried in the case so that it outlives the session), the message, and what to expect
//! of the turn — by default, what the recording did. A case written by hand has no history
//! and may hold several turns (a conversation).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stead_actors::{SessionEvent, SessionState};
use stead_persistence::Event;
use uuid::Uuid;

use crate::expect::Expectation;
use crate::outcome::{read_turn, TurnOutcome};

/// One journal entry of a case's history, as the journal held it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub kind: String,
    pub payload: Value,
    pub at: DateTime<Utc>,
}

/// The recorded session a case was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseSource {
    pub session_id: Uuid,
    /// The seq of the user message the case starts at.
    pub at_seq: i64,
}

/// One user message of a case and what its turn must do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseTurn {
    pub user: String,
    /// Graded each on its own; none: graded against `recorded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expect: Vec<Expectation>,
    /// What the recorded session's turn did (tool results, approvals, reply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<TurnOutcome>,
}

impl CaseTurn {
    /// How an approval this turn asks for is decided when no recorded decision matches:
    /// the case's `approve` expectation, if any.
    pub fn approve(&self) -> Option<bool> {
        self.expect.iter().find_map(|e| match e {
            Expectation::Approve { approved } => Some(*approved),
            _ => None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    pub id: Uuid,
    pub name: String,
    /// The agent whose loop runs the case.
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<CaseSource>,
    /// The journal before the first turn's message (empty for a case written by hand).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<JournalEntry>,
    pub turns: Vec<CaseTurn>,
}

/// A case's name: its message on one line, at most 60 characters (the source session and seq
/// are the case's `source`).
pub fn case_name(user: &str) -> String {
    let line = user.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None if line.is_empty() => "(an empty message)".into(),
        None => line,
    }
}

/// Why a point in a session cannot be a case.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CaseError {
    #[error("the session has no user message")]
    NoUserMessage,
    #[error("seq {0} is not a user message of the session")]
    NotAUserMessage(i64),
    #[error(
        "the user message at seq {0} arrived while a turn ran; a case starts at a message that \
         started a turn"
    )]
    Busy(i64),
    #[error("the session's journal before seq {0} was compacted; its history is gone")]
    Compacted(i64),
    #[error("{0}")]
    Invalid(String),
}

impl Case {
    /// The case at the user message `at_seq` (default: the session's first) of a recorded
    /// session whose journal is `events` (from seq 1). Its turn expects `expect`, or, when that
    /// is empty, what the recording did.
    pub fn from_journal(
        agent: &str,
        session_id: Uuid,
        events: &[Event],
        at_seq: Option<i64>,
        expect: Vec<Expectation>,
    ) -> Result<Case, CaseError> {
        if events.first().is_some_and(|e| e.seq != 1) {
            return Err(CaseError::Compacted(events[0].seq));
        }
        let message = match at_seq {
            Some(seq) => events
                .iter()
                .find(|e| e.seq == seq)
                .filter(|e| e.kind == "user_message")
                .ok_or(CaseError::NotAUserMessage(seq))?,
            None => events
                .iter()
                .find(|e| e.kind == "user_message")
                .ok_or(CaseError::NoUserMessage)?,
        };
        let mut state = SessionState::default();
        for event in events.iter().take_while(|e| e.seq < message.seq) {
            if let Some(typed) = SessionEvent::from_parts(&event.kind, &event.payload) {
                state.apply(event.seq, &typed);
            }
        }
        if state.turn.is_some() {
            return Err(CaseError::Busy(message.seq));
        }
        for e in &expect {
            e.check().map_err(|e| CaseError::Invalid(e.to_string()))?;
        }
        let user = message.payload["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let history = events
            .iter()
            .take_while(|e| e.seq < message.seq)
            .map(|e| JournalEntry {
                kind: e.kind.clone(),
                payload: e.payload.clone(),
                at: e.created_at,
            })
            .collect();
        Ok(Case {
            id: Uuid::now_v7(),
            name: case_name(&user),
            agent: agent.to_string(),
            source: Some(CaseSource {
                session_id,
                at_seq: message.seq,
            }),
            history,
            turns: vec![CaseTurn {
                user,
                expect,
                recorded: Some(read_turn(events, message.seq)),
            }],
        })
    }

    /// Checks a case read from outside (a file, a request).
    pub fn check(&self) -> Result<(), CaseError> {
        if self.agent.is_empty() {
            return Err(CaseError::Invalid(format!(
                "case `{}` names no agent",
                self.name
            )));
        }
        if self.turns.is_empty() {
            return Err(CaseError::Invalid(format!(
                "case `{}` has no turn",
                self.name
            )));
        }
        for turn in &self.turns {
            for e in &turn.expect {
                e.check()
                    .map_err(|e| CaseError::Invalid(format!("case `{}`: {e}", self.name)))?;
            }
        }
        Ok(())
    }
}

//! `stead-evals` owns evaluation from the journal (docs/evals.md): a *dataset* is a named,
//! versioned list of *cases*; a case is a point in a recorded session — the journal before one
//! user message, the message, and what the turn did then — plus expectations ([`case`]). The
//! turn a run makes is read back from its journal the same way as the recording
//! ([`outcome`]), graded by the case's expectations or, without any, against the recording
//! ([`grade`]), and diffed decision by decision against it ([`diff`]). Datasets travel as
//! JSONL ([`jsonl`]). It knows nothing of HTTP or of how a model is called: runs go through
//! the session actors of `stead-actors` ([`run`], with tools served from the recording:
//! [`tools`]), and a judge is any [`grade::Judge`]. Two runs compare case by case
//! ([`compare`]).

pub mod case;
pub mod compare;
pub mod diff;
pub mod expect;
pub mod grade;
pub mod jsonl;
pub mod outcome;
pub mod run;
#[cfg(test)]
mod tests;
pub mod tools;

pub use case::{Case, CaseError, CaseSource, CaseTurn, JournalEntry};
pub use expect::{Expectation, Matcher};
pub use grade::{Judge, JudgeError, Verdict};
pub use outcome::{CallOutcome, TurnOutcome};
pub use run::{ApprovalRule, CaseResult, RunError, RunSettings, Runner};
pub use tools::ToolMode;

//! A session's schedules (docs/schedules.md): their definitions, as the REST body, the agent's
//! `schedule` tool and `schedule_created` carry them; their folded state; and the decisions on
//! them — create (idempotent by key), cancel, and fire what is due at a given instant. The
//! instant is part of the input, so the decisions stay pure and the decision check re-decides
//! a firing from its journaled `at`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::decide::Refusal;
use crate::events::SessionEvent;
pub mod timing;

pub use timing::{occurrences, CatchUp, Firing, Occurrences, SKIP_GRACE_SECS};
use timing::{Due, InvalidTiming, Timing};

/// What a firing delivers: a user message — its `text`, or the agent's `callback` (a prompt
/// template from the agent's configuration) rendered with `args` and the occurrence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(deny_unknown_fields)]
pub struct ScheduleMessage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub callback: Option<String>,
    /// The callback's arguments (a JSON object), as `args` in its template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional, type = "Record<string, unknown>")]
    pub args: Option<serde_json::Value>,
}

impl ScheduleMessage {
    /// A fixed text.
    pub fn text(text: impl Into<String>) -> Self {
        ScheduleMessage {
            text: Some(text.into()),
            callback: None,
            args: None,
        }
    }

    /// Checks the message against the agent's callbacks: a non-empty text, or a configured
    /// callback (with an object of arguments, if any) whose template renders.
    fn check(&self, callbacks: &BTreeMap<String, String>) -> Result<(), MessageError> {
        match (&self.text, &self.callback) {
            (Some(text), None) if !text.trim().is_empty() => Ok(()),
            (Some(_), None) => Err(MessageError::EmptyText),
            (None, Some(name)) => {
                if self.args.as_ref().is_some_and(|a| !a.is_object()) {
                    return Err(MessageError::ArgsNotObject);
                }
                let template = callbacks.get(name).ok_or_else(|| {
                    let known: Vec<&str> = callbacks.keys().map(String::as_str).collect();
                    MessageError::NoCallback {
                        name: name.clone(),
                        known: if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        },
                    }
                })?;
                let sample = Occurrence {
                    key: "key",
                    due_at: DateTime::<Utc>::UNIX_EPOCH,
                    missed: 0,
                };
                render(template, self.args.as_ref(), &sample).map(|_| ())
            }
            _ => Err(MessageError::NotOne),
        }
    }

    /// The text a firing delivers: the fixed text, or the callback rendered for `occurrence`.
    pub fn deliver(
        &self,
        callbacks: &BTreeMap<String, String>,
        occurrence: &Occurrence,
    ) -> Result<String, MessageError> {
        if let Some(text) = &self.text {
            return Ok(text.clone());
        }
        let name = self.callback.as_deref().unwrap_or_default();
        let template = callbacks
            .get(name)
            .ok_or_else(|| MessageError::CallbackGone(name.to_string()))?;
        render(template, self.args.as_ref(), occurrence)
    }
}

/// Whether `template` parses as a callback's template (configuration checks it at start).
pub fn check_template(template: &str) -> Result<(), MessageError> {
    minijinja::Environment::new()
        .template_from_str(template)
        .map(|_| ())
        .map_err(MessageError::NotATemplate)
}

/// Why a schedule's message cannot be made (defining it is refused; firing it cancels it).
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("`message.text` must not be empty")]
    EmptyText,
    #[error("`message.args` must be a JSON object")]
    ArgsNotObject,
    #[error("the agent has no callback `{name}` (it has: {known})")]
    NoCallback { name: String, known: String },
    #[error("give exactly one of `message.text` and `message.callback`")]
    NotOne,
    #[error("its callback `{0}` is no longer configured")]
    CallbackGone(String),
    #[error("not a template: {0}")]
    NotATemplate(#[source] minijinja::Error),
    #[error("the callback's template does not render: {0}")]
    Render(#[source] minijinja::Error),
    #[error("the callback's template renders an empty message")]
    RendersEmpty,
}

/// What a callback's template sees of the occurrence it renders for.
pub struct Occurrence<'a> {
    pub key: &'a str,
    pub due_at: DateTime<Utc>,
    pub missed: u64,
}

/// Renders a callback's template (minijinja, strict about undefined names) with `key`,
/// `due_at` (RFC 3339), `missed` and `args`.
pub fn render(
    template: &str,
    args: Option<&serde_json::Value>,
    occurrence: &Occurrence,
) -> Result<String, MessageError> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    let context = minijinja::context! {
        key => occurrence.key,
        due_at => occurrence.due_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        missed => occurrence.missed,
        args => args.cloned().unwrap_or_else(|| serde_json::json!({})),
    };
    let text = env
        .render_str(template, context)
        .map_err(MessageError::Render)?;
    if text.trim().is_empty() {
        return Err(MessageError::RendersEmpty);
    }
    Ok(text)
}

/// A schedule's definition: exactly one of `at`, `delay_secs`, `cron` (with `tz`, default
/// `UTC`) and `every_secs`; the message; the catch-up rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct ScheduleDef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional, type = "string")]
    pub at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional, type = "number")]
    pub delay_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub tz: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional, type = "number")]
    pub every_secs: Option<u64>,
    pub message: ScheduleMessage,
    #[serde(default)]
    pub catch_up: CatchUp,
}

impl ScheduleDef {
    /// `at`, `delay`, `cron` or `every`.
    pub fn kind(&self) -> &'static str {
        match (&self.at, &self.delay_secs, &self.cron) {
            (Some(_), _, _) => "at",
            (_, Some(_), _) => "delay",
            (_, _, Some(_)) => "cron",
            _ => "every",
        }
    }

    /// The timing this definition names; refused unless exactly one kind is given (and `tz`
    /// only with `cron`).
    pub fn timing(&self) -> Result<Timing, InvalidTiming> {
        let given = [
            self.at.is_some(),
            self.delay_secs.is_some(),
            self.cron.is_some(),
            self.every_secs.is_some(),
        ]
        .iter()
        .filter(|g| **g)
        .count();
        if given != 1 {
            return Err(InvalidTiming(
                "give exactly one of `at`, `delay_secs`, `cron` and `every_secs`".into(),
            ));
        }
        if self.tz.is_some() && self.cron.is_none() {
            return Err(InvalidTiming("`tz` goes with `cron` only".into()));
        }
        Ok(if let Some(at) = self.at {
            Timing::At { at }
        } else if let Some(delay_secs) = self.delay_secs {
            Timing::Delay { delay_secs }
        } else if let Some(cron) = &self.cron {
            Timing::Cron {
                cron: cron.clone(),
                tz: self.tz.clone().unwrap_or_else(|| "UTC".into()),
            }
        } else {
            Timing::Every {
                every_secs: self.every_secs.unwrap_or_default(),
            }
        })
    }
}

/// A schedule as the fold holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleState {
    pub def: ScheduleDef,
    pub created_at: DateTime<Utc>,
    /// `None`: done (a one-time schedule that fired). The newest [`MAX_DONE_SCHEDULES`] done
    /// schedules stay, so that creating the same key with the same definition again is still
    /// a no-op.
    pub next_due_at: Option<DateTime<Utc>>,
    pub fired: u64,
}

impl ScheduleState {
    pub(crate) fn due(&self) -> Option<Due> {
        Due::new(self.def.timing().ok()?, self.created_at, 0).ok()
    }
}

/// Limits on an agent's sessions' schedules (`[schedules]` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleLimits {
    /// The shortest `every_secs` (and cron period is not checked: cron's finest is a minute).
    pub min_interval_secs: u64,
    /// Pending schedules a session may hold.
    pub max_per_session: usize,
    /// Firings one session's schedules may make in any hour, all together; an occurrence
    /// over it waits (and, under `catch_up = "one"`, counts as missed when it fires).
    pub max_firings_per_hour: u32,
    /// Messages a session holds while a turn runs (`sessions.max_queued_messages`): a
    /// firing that would queue past it waits.
    pub max_queued: usize,
}

/// The default of `schedules.max_firings_per_hour`.
pub const DEFAULT_MAX_FIRINGS_PER_HOUR: u32 = 60;

impl Default for ScheduleLimits {
    fn default() -> Self {
        ScheduleLimits {
            min_interval_secs: 1,
            max_per_session: 100,
            max_firings_per_hour: DEFAULT_MAX_FIRINGS_PER_HOUR,
            max_queued: 32,
        }
    }
}

/// The longest schedule key.
pub const MAX_KEY_CHARS: usize = 128;

/// Whether `key` is a schedule key: 1 to 128 letters, digits, `-`, `_` and `.`.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.chars().count() <= MAX_KEY_CHARS
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Checks a definition as creating it at `now` would: the key, the message, the timing (and
/// its limits). The timing, ready to compute occurrences.
pub fn check_definition(
    key: &str,
    def: &ScheduleDef,
    rules: &crate::rules::AgentRules,
    now: DateTime<Utc>,
) -> Result<Due, Refusal> {
    let limits = rules.schedules;
    if !valid_key(key) {
        return Err(Refusal::InvalidSchedule(format!(
            "`key` must be 1 to {MAX_KEY_CHARS} letters, digits, `-`, `_` or `.`"
        )));
    }
    def.message
        .check(&rules.callbacks)
        .map_err(|e| Refusal::InvalidSchedule(e.to_string()))?;
    let timing = def
        .timing()
        .map_err(|e| Refusal::InvalidSchedule(e.to_string()))?;
    Due::new(timing, now, limits.min_interval_secs)
        .map_err(|e| Refusal::InvalidSchedule(e.to_string()))
}

/// A schedule as clients see it (the REST list, the `schedule` tool's results): its
/// definition's fields, its key and kind, and where it stands.
pub fn schedule_view(key: &str, schedule: &ScheduleState) -> serde_json::Value {
    use serde_json::json;
    let mut view = json!(schedule.def);
    view["key"] = json!(key);
    view["kind"] = json!(schedule.def.kind());
    view["created_at"] = json!(schedule.created_at);
    view["next_due_at"] = json!(schedule.next_due_at);
    view["fired"] = json!(schedule.fired);
    view["status"] = json!(if schedule.next_due_at.is_some() {
        "pending"
    } else {
        "done"
    });
    view
}

/// Folds a schedule event into a session's schedules.
/// Done one-time schedules a session keeps (the newest by creation): enough that re-creating
/// a schedule that just fired is still a no-op, without the state growing with every firing.
pub const MAX_DONE_SCHEDULES: usize = 32;

/// Forgets the oldest done schedules beyond [`MAX_DONE_SCHEDULES`] (part of the fold: replay
/// prunes the same ones).
fn prune_done(schedules: &mut BTreeMap<String, ScheduleState>) {
    let mut done: Vec<(DateTime<Utc>, String)> = schedules
        .iter()
        .filter(|(_, s)| s.next_due_at.is_none())
        .map(|(key, s)| (s.created_at, key.clone()))
        .collect();
    if done.len() > MAX_DONE_SCHEDULES {
        done.sort();
        for (_, key) in &done[..done.len() - MAX_DONE_SCHEDULES] {
            schedules.remove(key);
        }
    }
}

pub(crate) fn apply(schedules: &mut BTreeMap<String, ScheduleState>, event: &SessionEvent) {
    match event {
        SessionEvent::ScheduleCreated {
            key,
            schedule,
            created_at,
            next_due_at,
        } => {
            schedules.insert(
                key.clone(),
                ScheduleState {
                    def: schedule.clone(),
                    created_at: *created_at,
                    next_due_at: *next_due_at,
                    fired: 0,
                },
            );
        }
        SessionEvent::ScheduleFired {
            key, next_due_at, ..
        } => {
            if let Some(s) = schedules.get_mut(key) {
                s.next_due_at = *next_due_at;
                s.fired += 1;
            }
            if next_due_at.is_none() {
                prune_done(schedules);
            }
        }
        SessionEvent::ScheduleSkipped {
            key, next_due_at, ..
        } => {
            if let Some(s) = schedules.get_mut(key) {
                s.next_due_at = *next_due_at;
            }
        }
        SessionEvent::ScheduleCancelled { key, .. } => {
            schedules.remove(key);
        }
        _ => {}
    }
}

//! Schedules in decisions: create, cancel, fire what is due (queued behind a running turn,
//! bounded per hour), expire approvals.

use crate::decide::{Planner, Refusal};
use crate::events::SessionEvent;
use crate::schedules::*;
use chrono::{DateTime, Duration, Utc};

impl Planner<'_> {
    /// `schedule_created`, unless the same schedule exists ([`Refusal::ScheduleExists`]) or
    /// another one holds the key and `replace` is not set ([`Refusal::ScheduleConflict`]).
    pub(crate) fn create_schedule(
        &mut self,
        key: String,
        def: ScheduleDef,
        replace: bool,
        now: DateTime<Utc>,
    ) -> Result<(), Refusal> {
        let limits = self.agent.schedules;
        let due = check_definition(&key, &def, self.agent, now)?;
        match self.state.schedules.get(&key) {
            Some(existing) if existing.def == def => return Err(Refusal::ScheduleExists),
            Some(_) if !replace => return Err(Refusal::ScheduleConflict),
            _ => {}
        }
        let pending = self
            .state
            .schedules
            .iter()
            .filter(|(k, s)| s.next_due_at.is_some() && **k != key)
            .count();
        if pending >= limits.max_per_session {
            return Err(Refusal::TooManySchedules(limits.max_per_session));
        }
        let next_due_at = due.next_after(now);
        self.push(SessionEvent::ScheduleCreated {
            key,
            schedule: def,
            created_at: now,
            next_due_at,
        });
        Ok(())
    }

    pub(crate) fn cancel_schedule(&mut self, key: String, reason: String) -> Result<(), Refusal> {
        if !self.state.schedules.contains_key(&key) {
            return Err(Refusal::NoSuchSchedule);
        }
        self.push(SessionEvent::ScheduleCancelled { key, reason });
        Ok(())
    }

    /// `schedule_cancelled` for every pending schedule (the session closed or failed).
    pub(crate) fn cancel_all_schedules(&mut self, reason: &str) {
        let keys: Vec<String> = self
            .state
            .schedules
            .iter()
            .filter(|(_, s)| s.next_due_at.is_some())
            .map(|(key, _)| key.clone())
            .collect();
        for key in keys {
            self.push(SessionEvent::ScheduleCancelled {
                key,
                reason: reason.to_string(),
            });
        }
    }

    /// Fires (or, under `skip`, skips) every schedule due at `now`, earliest first: each
    /// firing is `schedule_fired` then the `user_message` it delivers, which starts a turn or
    /// queues behind the running one. [`Refusal::NothingDue`] when none is due.
    ///
    /// Limits (docs/schedules.md, "Limits"): a schedule whose last firing still waits in the
    /// queue does not fire; no firing queues past `max_queued` messages; the session fires at
    /// most `max_firings_per_hour` in any hour. What a limit holds back stays due and fires
    /// when it allows ([`Refusal::QueueFull`] or [`Refusal::FiringLimit`] when nothing fired).
    pub(crate) fn fire_due(&mut self, now: DateTime<Utc>) -> Result<(), Refusal> {
        let mut due: Vec<(DateTime<Utc>, String)> = self
            .state
            .schedules
            .iter()
            .filter_map(|(key, s)| Some((s.next_due_at?, key.clone())))
            .filter(|(at, _)| *at <= now)
            .collect();
        due.sort();
        if due.is_empty() {
            return Err(Refusal::NothingDue);
        }
        let before = self.decision_len();
        let mut held: Option<Refusal> = None;
        for (first, key) in due {
            if self.state.schedule_queued(&key) {
                held.get_or_insert(Refusal::QueueFull);
                continue;
            }
            let Some(schedule) = self.state.schedules.get(&key).cloned() else {
                continue;
            };
            let Some(timing) = schedule.due() else {
                // A definition this version cannot compute (it validated when created).
                self.push(SessionEvent::ScheduleCancelled {
                    key,
                    reason: "its timing is no longer valid".into(),
                });
                continue;
            };
            match occurrences(&timing, schedule.def.catch_up, first, now) {
                Occurrences::Fire(firings) => {
                    for firing in firings {
                        let occurrence = Occurrence {
                            key: &key,
                            due_at: firing.due_at,
                            missed: firing.missed,
                        };
                        // (`catch_up = "all"`: one firing queued at a time, the rest wait.)
                        let waiting = self
                            .state
                            .schedule_queued(&key)
                            .then_some(Refusal::QueueFull);
                        if let Some(refusal) = waiting.or_else(|| self.firing_held(now)) {
                            held.get_or_insert(refusal);
                            break;
                        }
                        match schedule
                            .def
                            .message
                            .deliver(&self.agent.callbacks, &occurrence)
                        {
                            Ok(text) => self.fire(&key, &text, firing, now),
                            Err(why) => {
                                self.push(SessionEvent::ScheduleCancelled {
                                    key: key.clone(),
                                    reason: why.to_string(),
                                });
                                break;
                            }
                        }
                    }
                }
                Occurrences::Skip {
                    missed,
                    next_due_at,
                } => self.push(SessionEvent::ScheduleSkipped {
                    key: key.clone(),
                    at: now,
                    missed,
                    next_due_at,
                }),
            }
        }
        match held {
            Some(refusal) if self.decision_len() == before => Err(refusal),
            _ => Ok(()),
        }
    }

    /// Why a firing at `now` must wait, if it must: the queue is full, or the session's
    /// schedules fired `max_firings_per_hour` times in the hour before `now` (until when).
    fn firing_held(&self, now: DateTime<Utc>) -> Option<Refusal> {
        let limits = self.agent.schedules;
        if self.state.turn.is_some() && self.state.queued.len() >= limits.max_queued {
            return Some(Refusal::QueueFull);
        }
        let hour_before = now - Duration::hours(1);
        let recent = &self.state.recent_firings;
        let in_hour = recent.iter().filter(|t| **t > hour_before).count();
        if in_hour >= limits.max_firings_per_hour as usize {
            // The window frees a firing when the oldest one in it is an hour old.
            let oldest = recent.iter().find(|t| **t > hour_before).copied();
            return Some(Refusal::FiringLimit(
                oldest.map_or(now, |t| t + Duration::hours(1)),
            ));
        }
        None
    }

    fn fire(&mut self, key: &str, text: &str, firing: Firing, now: DateTime<Utc>) {
        self.push(SessionEvent::ScheduleFired {
            key: key.to_string(),
            due_at: firing.due_at,
            at: now,
            next_due_at: firing.next_due_at,
            missed: firing.missed,
        });
        self.push(SessionEvent::UserMessage {
            text: text.to_string(),
            client_id: None,
            mode: None,
            schedule: Some(key.to_string()),
            attachments: Vec::new(),
        });
    }
}

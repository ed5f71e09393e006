//! When schedules are due (docs/schedules.md): the kinds (`at`, `delay`,
//! `cron` in an IANA zone, `every`), their validation, and the one pure function that gives a
//! schedule's next due instant strictly after a given one — so every due instant can be
//! recomputed from the last journaled one after a crash, and tests use an injected clock.
//!
//! Cron expressions have five fields (minute, hour, day of month, month, day of week; names
//! and `@daily`-style nicknames allowed), parsed by `croner`; zones come from `chrono-tz`,
//! whose database is compiled in. Daylight-saving rule: a fixed time of day that does not
//! exist (the skipped hour) fires once, at the first instant after the change; a wall-clock
//! time that happens twice (the repeated hour) fires once, at its first instant; wildcard and
//! step expressions have no occurrences inside a skipped hour.

use chrono::{DateTime, Duration, LocalResult, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// A schedule's timing, as its `schedule_created` event records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Timing {
    /// Once, at an instant.
    At { at: DateTime<Utc> },
    /// Once, this many seconds after its creation.
    Delay { delay_secs: u64 },
    /// At the instants a five-field cron expression names, in an IANA time zone.
    Cron { cron: String, tz: String },
    /// Every this many seconds from its creation.
    Every { every_secs: u64 },
}

/// Why a timing is refused (the message names the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidTiming(pub String);

/// A validated timing, ready to compute due instants.
#[derive(Debug, Clone)]
pub struct Due {
    timing: Timing,
    created_at: DateTime<Utc>,
    cron: Option<(Cron, Tz)>,
}

/// The longest delay or interval.
const TEN_YEARS_SECS: u64 = 10 * 365 * 86_400;

/// Occurrences a catch-up of kind `all` fires at most.
pub const MAX_CATCH_UP: usize = 1000;

impl Due {
    /// Checks `timing` for a schedule created at `created_at`: a known zone, a five-field
    /// expression that fires at all, an interval of at least `min_interval_secs`, an `at` after
    /// its creation.
    pub fn new(
        timing: Timing,
        created_at: DateTime<Utc>,
        min_interval_secs: u64,
    ) -> Result<Due, InvalidTiming> {
        let cron = match &timing {
            Timing::At { at } if *at <= created_at => {
                return Err(InvalidTiming(format!("`at` ({at}) is not in the future")))
            }
            Timing::Every { every_secs } if *every_secs < min_interval_secs.max(1) => {
                return Err(InvalidTiming(format!(
                    "`every_secs` must be at least {}",
                    min_interval_secs.max(1)
                )))
            }
            Timing::Delay { delay_secs } if *delay_secs > TEN_YEARS_SECS => {
                return Err(InvalidTiming("`delay_secs` is over ten years".into()))
            }
            Timing::Every { every_secs } if *every_secs > TEN_YEARS_SECS => {
                return Err(InvalidTiming("`every_secs` is over ten years".into()))
            }
            Timing::Cron { cron, tz } => Some(parse_cron(cron, tz)?),
            _ => None,
        };
        let due = Due {
            timing,
            created_at,
            cron,
        };
        if due.cron.is_some() && due.next_after(created_at).is_none() {
            return Err(InvalidTiming(
                "`cron` never fires (no date matches it)".into(),
            ));
        }
        Ok(due)
    }

    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// The first due instant strictly after `t` (`None`: no more).
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.timing {
            Timing::At { at } => (*at > t).then_some(*at),
            Timing::Delay { delay_secs } => {
                let at = self.created_at + Duration::seconds(*delay_secs as i64);
                (at > t).then_some(at)
            }
            Timing::Every { every_secs } => {
                let step = (*every_secs).max(1) as i64;
                let since = (t - self.created_at).num_seconds().max(0);
                Some(self.created_at + Duration::seconds((since / step + 1) * step))
            }
            Timing::Cron { .. } => {
                let (cron, tz) = self.cron.as_ref()?;
                next_cron(cron, *tz, t)
            }
        }
    }

    /// The due instants in `(after, until]`, in order, at most `limit`.
    pub fn due_between(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> Vec<DateTime<Utc>> {
        let mut due = Vec::new();
        let mut at = after;
        while due.len() < limit {
            match self.next_after(at) {
                Some(next) if next <= until => {
                    due.push(next);
                    at = next;
                }
                _ => break,
            }
        }
        due
    }
}

/// A five-field cron expression (no seconds, no year) and an IANA zone.
fn parse_cron(expression: &str, zone: &str) -> Result<(Cron, Tz), InvalidTiming> {
    let tz: Tz = zone
        .parse()
        .map_err(|_| InvalidTiming(format!("`tz`: `{zone}` is not an IANA time zone")))?;
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(expression)
        .map_err(|e| InvalidTiming(format!("`cron`: `{expression}` is not valid: {e}")))?;
    Ok((cron, tz))
}

/// The next occurrence strictly after `t`, firing each wall-clock time once. croner 3.0.1,
/// asked from inside the second pass of a repeated hour, answers the first pass (before `t`);
/// and an answer in a second pass must not fire again. Either way the search starts over from
/// the first minute after the repeated hour.
fn next_cron(cron: &Cron, tz: Tz, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let mut from = t.with_timezone(&tz);
    let mut inclusive = false;
    for _ in 0..4 {
        let next = cron.find_next_occurrence(&from, inclusive).ok()?;
        let second_pass = matches!(
            tz.from_local_datetime(&next.naive_local()),
            LocalResult::Ambiguous(_, later) if later == next
        );
        let utc = next.with_timezone(&Utc);
        if utc > t && !second_pass {
            return Some(utc);
        }
        let mut skip = next.max(from) + Duration::minutes(1);
        for _ in 0..180 {
            if matches!(
                tz.from_local_datetime(&skip.naive_local()),
                LocalResult::Single(_)
            ) {
                break;
            }
            skip += Duration::minutes(1);
        }
        // From the first whole minute after the repeated hour, that minute included.
        from = skip.with_second(0)?.with_nanosecond(0)?;
        inclusive = true;
    }
    None
}

/// What a schedule does with occurrences it missed (the server was down, or the session's
/// firing waited): `one` fires once for all of them, `all` fires each (at most
/// [`MAX_CATCH_UP`]), `skip` fires none that are more than [`SKIP_GRACE_SECS`] late.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    #[default]
    One,
    All,
    Skip,
}

/// How late an occurrence may fire under `catch_up = "skip"`.
pub const SKIP_GRACE_SECS: i64 = 60;

/// One occurrence that fires: when it was due, the schedule's next due time after it, and how
/// many missed occurrences it stands for (`catch_up = "one"` or `"skip"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Firing {
    pub due_at: DateTime<Utc>,
    pub next_due_at: Option<DateTime<Utc>>,
    pub missed: u64,
}

/// What a schedule whose first pending occurrence is `first` does at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Occurrences {
    /// Fire these, in order.
    Fire(Vec<Firing>),
    /// `catch_up = "skip"` and every missed occurrence is over the grace: none fires.
    Skip {
        missed: u64,
        next_due_at: Option<DateTime<Utc>>,
    },
}

/// The catch-up rule applied: `one` fires `first` once for all missed occurrences, `all` fires
/// each (at most [`MAX_CATCH_UP`]), `skip` fires the latest within [`SKIP_GRACE_SECS`] if any.
pub fn occurrences(
    timing: &Due,
    catch_up: CatchUp,
    first: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Occurrences {
    let firing = |due_at, next_due_at, missed| Firing {
        due_at,
        next_due_at,
        missed,
    };
    match catch_up {
        CatchUp::All => {
            let mut due = vec![first];
            due.extend(timing.due_between(first, now, MAX_CATCH_UP - 1));
            let capped = due.len() >= MAX_CATCH_UP;
            let last = due.len() - 1;
            Occurrences::Fire(
                due.into_iter()
                    .enumerate()
                    .map(|(i, due_at)| {
                        let next = if i == last && capped {
                            timing.next_after(now)
                        } else {
                            timing.next_after(due_at)
                        };
                        firing(due_at, next, 0)
                    })
                    .collect(),
            )
        }
        CatchUp::One => {
            let missed = timing.due_between(first, now, MAX_CATCH_UP).len() as u64;
            Occurrences::Fire(vec![firing(first, timing.next_after(now), missed)])
        }
        CatchUp::Skip => {
            let grace = now - Duration::seconds(SKIP_GRACE_SECS);
            let next = timing.next_after(now);
            if first >= grace {
                let missed = timing.due_between(first, now, MAX_CATCH_UP).len() as u64;
                return Occurrences::Fire(vec![firing(first, next, missed)]);
            }
            // Late: the occurrences before the grace are skipped; the latest within it (if
            // any) fires.
            let late = 1 + timing.due_between(first, grace, MAX_CATCH_UP).len() as u64;
            match timing.due_between(grace, now, 1).first() {
                Some(recent) => Occurrences::Fire(vec![firing(*recent, next, late)]),
                None => Occurrences::Skip {
                    missed: late,
                    next_due_at: next,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn cron(expression: &str, zone: &str) -> Due {
        Due::new(
            Timing::Cron {
                cron: expression.into(),
                tz: zone.into(),
            },
            utc("2025-01-01T00:00:00Z"),
            1,
        )
        .unwrap()
    }

    /// The due instants in `(from, until]`, as RFC 3339 in UTC.
    fn between(due: &Due, from: &str, until: &str) -> Vec<String> {
        due.due_between(utc(from), utc(until), 100)
            .iter()
            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .collect()
    }

    #[test]
    fn a_cron_in_a_zone_fires_at_local_wall_clock_times() {
        // 09:00 in Paris: 08:00 UTC in winter, 07:00 UTC in summer.
        let daily = cron("0 9 * * *", "Europe/Paris");
        assert_eq!(
            between(&daily, "2025-03-29T00:00:00Z", "2025-03-31T23:00:00Z"),
            [
                "2025-03-29T08:00:00Z",
                "2025-03-30T07:00:00Z",
                "2025-03-31T07:00:00Z"
            ]
        );
        let weekdays = cron("30 17 * * MON-FRI", "America/New_York");
        assert_eq!(
            between(&weekdays, "2025-06-06T00:00:00Z", "2025-06-10T00:00:00Z"),
            ["2025-06-06T21:30:00Z", "2025-06-09T21:30:00Z"]
        );
    }

    #[test]
    fn the_skipped_hour_fires_a_fixed_time_once_just_after_the_change() {
        // New York, 2025-03-09: 02:00 EST becomes 03:00 EDT; 02:30 does not exist.
        let fixed = cron("30 2 * * *", "America/New_York");
        assert_eq!(
            between(&fixed, "2025-03-08T00:00:00Z", "2025-03-10T12:00:00Z"),
            [
                "2025-03-08T07:30:00Z", // 02:30 EST
                "2025-03-09T07:00:00Z", // 03:00 EDT, the first instant after the change
                "2025-03-10T06:30:00Z"  // 02:30 EDT
            ]
        );
        // A step expression has no occurrences inside the gap.
        let quarter = cron("*/30 * * * *", "America/New_York");
        assert_eq!(
            between(&quarter, "2025-03-09T06:00:00Z", "2025-03-09T07:30:00Z"),
            [
                "2025-03-09T06:30:00Z", // 01:30 EST
                "2025-03-09T07:00:00Z", // 03:00 EDT
                "2025-03-09T07:30:00Z"  // 03:30 EDT
            ]
        );
    }

    #[test]
    fn the_repeated_hour_fires_each_wall_clock_time_once() {
        // New York, 2025-11-02: 01:00–01:59 happens twice (EDT, then EST).
        let fixed = cron("30 1 * * *", "America/New_York");
        assert_eq!(
            between(&fixed, "2025-11-01T12:00:00Z", "2025-11-03T12:00:00Z"),
            [
                "2025-11-02T05:30:00Z", // 01:30 EDT only
                "2025-11-03T06:30:00Z"  // 01:30 EST
            ]
        );
        let half_hourly = cron("*/30 * * * *", "America/New_York");
        assert_eq!(
            between(&half_hourly, "2025-11-02T04:45:00Z", "2025-11-02T07:00:00Z"),
            [
                "2025-11-02T05:00:00Z", // 01:00 EDT
                "2025-11-02T05:30:00Z", // 01:30 EDT
                "2025-11-02T07:00:00Z"  // 02:00 EST: the second pass is not fired again
            ]
        );
        // Asked from inside the second pass, the answer is never in the past, and the first
        // minute after the repeated hour is not skipped.
        let next = fixed.next_after(utc("2025-11-02T06:15:00Z")).unwrap();
        assert_eq!(next, utc("2025-11-03T06:30:00Z"));
        let next = half_hourly.next_after(utc("2025-11-02T06:15:30Z")).unwrap();
        assert_eq!(next, utc("2025-11-02T07:00:00Z"));
    }

    #[test]
    fn half_hour_shifts_and_midnight_transitions() {
        // Lord Howe moves by 30 minutes: 2025-04-06 02:00 (+11) becomes 01:30 (+10:30), so
        // 01:30–01:59 happens twice; 01:45 fires once, in its first pass.
        let lord_howe = cron("45 1 * * *", "Australia/Lord_Howe");
        assert_eq!(
            between(&lord_howe, "2025-04-05T00:00:00Z", "2025-04-06T16:00:00Z"),
            [
                "2025-04-05T14:45:00Z", // 01:45 +11
                "2025-04-06T15:15:00Z"  // 01:45 +10:30, the next day
            ]
        );
        // Santiago springs forward at midnight: 2025-09-07 00:00 (-04) becomes 01:00 (-03);
        // a daily 00:30 fires once that day, at 01:00.
        let santiago = cron("30 0 * * *", "America/Santiago");
        assert_eq!(
            between(&santiago, "2025-09-06T00:00:00Z", "2025-09-08T12:00:00Z"),
            [
                "2025-09-06T04:30:00Z", // 00:30 -04
                "2025-09-07T04:00:00Z", // 01:00 -03, the first instant after the change
                "2025-09-08T03:30:00Z"  // 00:30 -03
            ]
        );
    }

    #[test]
    fn one_shot_and_interval_timings() {
        let created = utc("2025-01-01T00:00:00Z");
        let delay = Due::new(Timing::Delay { delay_secs: 90 }, created, 1).unwrap();
        assert_eq!(delay.next_after(created), Some(utc("2025-01-01T00:01:30Z")));
        assert_eq!(delay.next_after(utc("2025-01-01T00:01:30Z")), None);
        let every = Due::new(Timing::Every { every_secs: 3600 }, created, 1).unwrap();
        assert_eq!(
            every.due_between(created, utc("2025-01-01T03:30:00Z"), 10),
            [
                utc("2025-01-01T01:00:00Z"),
                utc("2025-01-01T02:00:00Z"),
                utc("2025-01-01T03:00:00Z")
            ]
        );
        assert_eq!(
            every
                .due_between(created, utc("2025-12-31T00:00:00Z"), MAX_CATCH_UP)
                .len(),
            MAX_CATCH_UP
        );
        let at = Due::new(
            Timing::At {
                at: utc("2025-02-01T00:00:00Z"),
            },
            created,
            1,
        )
        .unwrap();
        assert_eq!(at.next_after(created), Some(utc("2025-02-01T00:00:00Z")));
    }

    #[test]
    fn bad_timings_are_refused_with_the_field_named() {
        let created = utc("2025-01-01T00:00:00Z");
        let refuse = |timing: Timing| Due::new(timing, created, 5).unwrap_err().0;
        let bad_cron = |c: &str, tz: &str| {
            refuse(Timing::Cron {
                cron: c.into(),
                tz: tz.into(),
            })
        };
        assert!(bad_cron("0 9 * * *", "Mars/Olympus").contains("`tz`"));
        assert!(
            bad_cron("0 0 9 * * *", "UTC").contains("`cron`"),
            "six fields"
        );
        assert!(bad_cron("61 * * * *", "UTC").contains("`cron`"));
        assert!(bad_cron("every day", "UTC").contains("`cron`"));
        assert!(bad_cron("0 0 30 2 *", "UTC").contains("never fires"));
        assert!(refuse(Timing::Every { every_secs: 2 }).contains("at least 5"));
        assert!(refuse(Timing::At { at: created }).contains("not in the future"));
    }
}

//! Schedule limits (docs/schedules.md, "Limits"): a wake-up never queues
//! past `max_queued`, a schedule never has two firings queued, and a session fires at most
//! `max_firings_per_hour` in any hour — what is held back stays due and fires later.

use chrono::Duration;
use stead_actors::{Input, Refusal, ScheduleDef};

use super::schedules::{def, t};
use super::*;

fn every_second(s: &mut Session, key: &str, now: chrono::DateTime<chrono::Utc>) {
    s.send(Input::CreateSchedule {
        key: key.into(),
        def: Box::new(ScheduleDef {
            every_secs: Some(1),
            ..def(&format!("tick {key}"))
        }),
        replace: false,
        now,
    })
    .unwrap();
}

fn fired(s: &Session) -> usize {
    s.journal
        .iter()
        .filter(|e| e.to_parts().0 == "schedule_fired")
        .count()
}

/// 100 schedules every second, all due at once: one turn starts and the queue fills to its
/// limit, never past it (before the fix: all 100 fired, 99 queued against a limit of 32).
#[test]
fn one_wake_up_never_queues_past_the_limit() {
    let mut s = Session::new();
    s.agent.schedules.max_queued = 32;
    let t0 = t("2026-04-01T00:00:00Z");
    for n in 0..100 {
        every_second(&mut s, &format!("k{n:03}"), t0);
    }
    s.send(Input::SchedulesDue {
        now: t0 + Duration::seconds(1),
    })
    .unwrap();
    assert_eq!(fired(&s), 33, "one turn and 32 queued");
    assert_eq!(s.state.queued.len(), 32);
    // The next wake-up finds the queue full: nothing fires, nothing is journaled.
    let before = s.journal.len();
    assert_eq!(
        s.send(Input::SchedulesDue {
            now: t0 + Duration::seconds(2),
        }),
        Err(Refusal::QueueFull)
    );
    assert_eq!(s.journal.len(), before);
    assert_eq!(s.replayed(), s.state);
}

/// A schedule whose firing waits in the queue does not fire again: its next occurrences stay
/// due (one firing counts them as missed).
#[test]
fn a_schedule_with_a_queued_firing_waits() {
    let mut s = Session::new();
    let t0 = t("2026-04-01T00:00:00Z");
    every_second(&mut s, "tick", t0);
    s.send(Input::UserMessage {
        text: "busy".into(),
        client_id: None,
        mode: None,
        attachments: Vec::new(),
    })
    .unwrap();
    s.send(Input::SchedulesDue {
        now: t0 + Duration::seconds(1),
    })
    .unwrap();
    assert_eq!(fired(&s), 1);
    for later in 2..10 {
        assert_eq!(
            s.send(Input::SchedulesDue {
                now: t0 + Duration::seconds(later),
            }),
            Err(Refusal::QueueFull),
            "at +{later} s"
        );
    }
    assert_eq!(s.state.queued.len(), 1);
    assert_eq!(s.replayed(), s.state);
}

/// 60 firings in an hour, then the session's schedules wait until the oldest is an hour old;
/// the refusal says until when (the scheduler sleeps until then).
#[test]
fn a_session_fires_at_most_its_hourly_limit() {
    let mut s = Session::new();
    s.agent.schedules.max_firings_per_hour = 60;
    let t0 = t("2026-04-01T00:00:00Z");
    every_second(&mut s, "tick", t0);
    let mut now = t0;
    for _ in 0..60 {
        now += Duration::seconds(10);
        s.send(Input::SchedulesDue { now }).unwrap();
        let call = format!("m{}", s.state.model_calls_total);
        super::schedules::finish_turn(&mut s, &call);
    }
    assert_eq!(fired(&s), 60);
    now += Duration::seconds(10);
    let first = t0 + Duration::seconds(10);
    assert_eq!(
        s.send(Input::SchedulesDue { now }),
        Err(Refusal::FiringLimit(first + Duration::hours(1)))
    );
    s.send(Input::SchedulesDue {
        now: first + Duration::hours(1) + Duration::seconds(1),
    })
    .unwrap();
    assert_eq!(fired(&s), 61);
    assert_eq!(s.replayed(), s.state);
}

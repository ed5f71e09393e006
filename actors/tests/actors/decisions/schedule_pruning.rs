//! Done one-time schedules are pruned from the state (docs/schedules.md): the fold keeps the
//! newest ones only, so a session's state does not grow with every firing.

use chrono::Duration;
use stead_actors::{ScheduleDef, SessionEvent};

use super::schedules::{def, t};

/// Fired one-time schedules do not pile up in the state (three rounds of 100 left 300
/// in it, `GET …/state` at 18 MB): the newest 32 done ones stay, the pending ones all do, and
/// replay prunes the same.
#[test]
fn done_one_time_schedules_are_pruned_to_the_newest() {
    use stead_actors::schedules::MAX_DONE_SCHEDULES;
    let mut state = stead_actors::SessionState::default();
    let t0 = t("2026-01-05T10:00:00Z");
    let mut seq = 0;
    let mut apply = |state: &mut stead_actors::SessionState, event: SessionEvent| {
        seq += 1;
        state.apply(seq, &event);
    };
    let total = MAX_DONE_SCHEDULES + 8;
    for n in 0..total {
        let created_at = t0 + Duration::seconds(n as i64);
        apply(
            &mut state,
            SessionEvent::ScheduleCreated {
                key: format!("k{n:03}"),
                schedule: ScheduleDef {
                    delay_secs: Some(1),
                    ..def("ping")
                },
                created_at,
                next_due_at: Some(created_at + Duration::seconds(1)),
            },
        );
    }
    // One more that stays pending.
    apply(
        &mut state,
        SessionEvent::ScheduleCreated {
            key: "later".into(),
            schedule: ScheduleDef {
                delay_secs: Some(3600),
                ..def("later")
            },
            created_at: t0,
            next_due_at: Some(t0 + Duration::hours(1)),
        },
    );
    for n in 0..total {
        let due_at = t0 + Duration::seconds(n as i64 + 1);
        apply(
            &mut state,
            SessionEvent::ScheduleFired {
                key: format!("k{n:03}"),
                due_at,
                at: due_at,
                next_due_at: None,
                missed: 0,
            },
        );
    }
    let keys: Vec<&String> = state.schedules.keys().collect();
    assert_eq!(keys.len(), MAX_DONE_SCHEDULES + 1, "{keys:?}");
    assert!(state.schedules.contains_key("later"));
    assert!(!state.schedules.contains_key("k000"), "the oldest went");
    assert!(state.schedules.contains_key(&format!("k{:03}", total - 1)));
}

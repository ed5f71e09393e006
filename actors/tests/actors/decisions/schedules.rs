//! Schedules as decisions, with an injected clock (the `now` of each input): a delay
//! fires once; a cron in a zone with daylight saving fires at the zone's wall-clock time; keys
//! make re-creation idempotent; catch-up modes; a firing queues behind a running turn; closing
//! cancels; bad definitions are refused with nothing journaled; and the decision check passes
//! on such a journal, with steering in it.

use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use stead_actors::{
    CatchUp, Input, MessageMode, Refusal, ScheduleDef, ScheduleMessage, SessionEvent,
};

use super::modes::check;
use super::*;

pub(super) fn t(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

pub(super) fn def(text: &str) -> ScheduleDef {
    ScheduleDef {
        at: None,
        delay_secs: None,
        cron: None,
        tz: None,
        every_secs: None,
        message: ScheduleMessage::text(text),
        catch_up: CatchUp::One,
    }
}

fn create(s: &mut Session, key: &str, def: ScheduleDef, now: DateTime<Utc>) -> Result<(), Refusal> {
    s.send(Input::CreateSchedule {
        key: key.into(),
        def: Box::new(def),
        replace: false,
        now,
    })
    .map(|_| ())
}

fn due(s: &mut Session, now: DateTime<Utc>) -> Result<Vec<Action>, Refusal> {
    s.send(Input::SchedulesDue { now })
}

/// `(key, due_at, next_due_at, missed)` of a `schedule_fired` event.
type Fired = (String, DateTime<Utc>, Option<DateTime<Utc>>, u64);

/// The firings journaled from `from` on.
fn fired(s: &Session, from: usize) -> Vec<Fired> {
    s.journal[from..]
        .iter()
        .filter_map(|e| match e {
            SessionEvent::ScheduleFired {
                key,
                due_at,
                next_due_at,
                missed,
                ..
            } => Some((key.clone(), *due_at, *next_due_at, *missed)),
            _ => None,
        })
        .collect()
}

pub(super) fn finish_turn(s: &mut Session, call: &str) {
    s.send(Input::ModelFinished {
        call_id: call.into(),
        output: ModelOutput {
            text: "done".into(),
            tool_calls: vec![],
            usage: Default::default(),
            provider: "p".into(),
            model: "m".into(),
            latency_ms: 1.0,
            ttft_ms: 1.0,
            cost: 0.0,
            guardrails: Vec::new(),
        },
    })
    .unwrap();
}

#[test]
fn a_delay_fires_once_and_its_key_makes_creation_idempotent() {
    let mut s = Session::new();
    let t0 = t("2026-01-05T10:00:00Z");
    let remind = ScheduleDef {
        delay_secs: Some(5),
        ..def("remind me")
    };
    create(&mut s, "remind", remind.clone(), t0).unwrap();
    assert_eq!(
        s.journal.last().unwrap().to_parts(),
        (
            "schedule_created".to_string(),
            json!({
                "key": "remind",
                "schedule": {"delay_secs": 5, "message": {"text": "remind me"}, "catch_up": "one"},
                "created_at": "2026-01-05T10:00:00Z",
                "next_due_at": "2026-01-05T10:00:05Z",
            })
        )
    );
    // The same definition again (an agent re-creating its schedules at start): nothing.
    let before = s.journal.len();
    assert_eq!(
        create(&mut s, "remind", remind.clone(), t0 + Duration::seconds(2)),
        Err(Refusal::ScheduleExists)
    );
    // Another definition under the key: a conflict unless replaced.
    let other = ScheduleDef {
        delay_secs: Some(9),
        ..def("remind me")
    };
    assert_eq!(
        create(&mut s, "remind", other, t0),
        Err(Refusal::ScheduleConflict)
    );
    assert_eq!(s.journal.len(), before);

    assert_eq!(
        due(&mut s, t0 + Duration::seconds(4)),
        Err(Refusal::NothingDue)
    );
    let actions = due(&mut s, t0 + Duration::milliseconds(5_200)).unwrap();
    assert_eq!(
        s.kinds_since(before),
        ["schedule_fired", "user_message", "model_call_started"]
    );
    assert_eq!(
        s.journal[before + 1].to_parts().1,
        json!({"text": "remind me", "client_id": null, "schedule": "remind"})
    );
    assert!(matches!(actions.as_slice(), [Action::CallModel { .. }]));
    assert_eq!(
        fired(&s, before),
        [("remind".into(), t0 + Duration::seconds(5), None, 0)]
    );
    // Done: it never fires again, and re-creating it is still a no-op.
    assert_eq!(
        due(&mut s, t0 + Duration::days(9)),
        Err(Refusal::NothingDue)
    );
    assert_eq!(s.state.schedules["remind"].next_due_at, None);
    assert_eq!(s.state.schedules["remind"].fired, 1);
    assert_eq!(
        create(&mut s, "remind", remind, t0 + Duration::days(9)),
        Err(Refusal::ScheduleExists)
    );
    assert_eq!(s.replayed(), s.state);
    check(&s);
}

#[test]
fn a_cron_in_paris_fires_at_nine_local_across_the_spring_change() {
    let mut s = Session::new();
    // Paris moves from UTC+1 to UTC+2 on 2025-03-30 at 02:00 local.
    let daily = ScheduleDef {
        cron: Some("0 9 * * *".into()),
        tz: Some("Europe/Paris".into()),
        ..def("good morning")
    };
    create(&mut s, "daily", daily, t("2025-03-28T12:00:00Z")).unwrap();
    assert_eq!(
        s.state.schedules["daily"].next_due_at,
        Some(t("2025-03-29T08:00:00Z"))
    );
    let mut at = Vec::new();
    for now in [
        "2025-03-29T07:59:59Z",
        "2025-03-29T08:00:00Z",
        "2025-03-30T06:59:59Z",
        "2025-03-30T07:00:01Z",
    ] {
        let from = s.journal.len();
        match due(&mut s, t(now)) {
            Ok(_) => {
                at.extend(fired(&s, from));
                let call = format!("m{}", s.state.model_calls_total);
                finish_turn(&mut s, &call);
            }
            Err(refusal) => assert_eq!(refusal, Refusal::NothingDue, "at {now}"),
        }
    }
    assert_eq!(
        at,
        [
            (
                "daily".to_string(),
                t("2025-03-29T08:00:00Z"),
                Some(t("2025-03-30T07:00:00Z")),
                0
            ),
            (
                "daily".to_string(),
                t("2025-03-30T07:00:00Z"),
                Some(t("2025-03-31T07:00:00Z")),
                0
            ),
        ]
    );
    check(&s);
}

#[test]
fn missed_occurrences_follow_the_catch_up_rule() {
    let t0 = t("2026-02-01T00:00:00Z");
    let every = |catch_up, secs| ScheduleDef {
        every_secs: Some(secs),
        catch_up,
        ..def("tick")
    };
    // Down for ten minutes: occurrences at +60 … +600 were missed; now is +601.
    let now = t0 + Duration::seconds(601);

    let mut one = Session::new();
    create(&mut one, "tick", every(CatchUp::One, 60), t0).unwrap();
    due(&mut one, now).unwrap();
    assert_eq!(
        fired(&one, 0),
        [(
            "tick".into(),
            t0 + Duration::seconds(60),
            Some(t0 + Duration::seconds(660)),
            9
        )]
    );

    // All: each missed occurrence fires, in order, one queued at a time (docs/schedules.md,
    // "Limits"): the first starts a turn, the second waits behind it, the rest stay due and
    // fire as turns end.
    let mut all = Session::new();
    create(&mut all, "tick", every(CatchUp::All, 60), t0).unwrap();
    due(&mut all, now).unwrap();
    assert_eq!(fired(&all, 0).len(), 2);
    assert_eq!(all.state.queued.len(), 1);
    assert_eq!(due(&mut all, now), Err(Refusal::QueueFull));
    while fired(&all, 0).len() < 10 {
        let call = format!("m{}", all.state.model_calls_total);
        finish_turn(&mut all, &call);
        due(&mut all, now).unwrap();
    }
    let fired_all = fired(&all, 0);
    assert_eq!(fired_all.len(), 10);
    assert_eq!(fired_all[0].1, t0 + Duration::seconds(60));
    assert_eq!(fired_all[9].1, t0 + Duration::seconds(600));
    assert_eq!(fired_all[9].2, Some(t0 + Duration::seconds(660)));

    // Skip: what is over a minute late is dropped; the latest occurrence within the minute
    // fires.
    let mut skip = Session::new();
    create(&mut skip, "tick", every(CatchUp::Skip, 60), t0).unwrap();
    due(&mut skip, now).unwrap();
    assert_eq!(
        fired(&skip, 0),
        [(
            "tick".into(),
            t0 + Duration::seconds(600),
            Some(t0 + Duration::seconds(660)),
            9
        )]
    );
    // Hourly, down for three hours: nothing within the minute, so nothing fires.
    let mut hourly = Session::new();
    create(&mut hourly, "hourly", every(CatchUp::Skip, 3600), t0).unwrap();
    let from = hourly.journal.len();
    due(&mut hourly, t0 + Duration::seconds(3 * 3600 + 120)).unwrap();
    assert_eq!(hourly.kinds_since(from), ["schedule_skipped"]);
    assert_eq!(
        hourly.state.schedules["hourly"].next_due_at,
        Some(t0 + Duration::seconds(4 * 3600))
    );
    for s in [&one, &all, &skip, &hourly] {
        assert_eq!(s.replayed(), s.state);
        check(s);
    }
}

#[test]
fn a_firing_queues_behind_a_running_turn_and_closing_cancels_schedules() {
    let mut s = Session::new();
    let t0 = t("2026-03-01T08:00:00Z");
    for key in ["a", "b"] {
        let every = ScheduleDef {
            every_secs: Some(60),
            ..def(&format!("from {key}"))
        };
        create(&mut s, key, every, t0).unwrap();
    }
    s.send(Input::UserMessage {
        text: "busy".into(),
        client_id: None,
        mode: None,
        attachments: Vec::new(),
    })
    .unwrap();
    // Steering joins the running turn; both firings queue behind it, in due order.
    s.send(Input::UserMessage {
        text: "also this".into(),
        client_id: None,
        mode: Some(MessageMode::Steer),
        attachments: Vec::new(),
    })
    .unwrap();
    let from = s.journal.len();
    due(&mut s, t0 + Duration::seconds(60)).unwrap();
    assert_eq!(
        s.kinds_since(from),
        [
            "schedule_fired",
            "user_message",
            "schedule_fired",
            "user_message"
        ]
    );
    assert_eq!(
        s.state.queued.iter().cloned().collect::<Vec<_>>(),
        ["from a", "from b"]
    );
    let from = s.journal.len();
    s.send(Input::Close {
        reason: "done".into(),
    })
    .unwrap();
    assert_eq!(
        s.kinds_since(from),
        ["session_closed", "schedule_cancelled", "schedule_cancelled"]
    );
    assert!(s.state.pending_schedules().is_empty());
    assert_eq!(due(&mut s, t0 + Duration::days(1)), Err(Refusal::Ended));
    assert_eq!(s.replayed(), s.state);
    check(&s);
}

#[test]
fn bad_schedules_are_refused_with_nothing_journaled() {
    let mut s = Session::new();
    s.agent.schedules.max_per_session = 2;
    s.agent.schedules.min_interval_secs = 10;
    let now = t("2026-04-01T00:00:00Z");
    let bad = [
        ("no kind", "k", def("x")),
        (
            "two kinds",
            "k",
            ScheduleDef {
                delay_secs: Some(1),
                every_secs: Some(60),
                ..def("x")
            },
        ),
        (
            "bad cron",
            "k",
            ScheduleDef {
                cron: Some("61 * * * *".into()),
                ..def("x")
            },
        ),
        (
            "six fields",
            "k",
            ScheduleDef {
                cron: Some("0 0 9 * * *".into()),
                ..def("x")
            },
        ),
        (
            "bad zone",
            "k",
            ScheduleDef {
                cron: Some("0 9 * * *".into()),
                tz: Some("Mars/Olympus".into()),
                ..def("x")
            },
        ),
        (
            "never",
            "k",
            ScheduleDef {
                cron: Some("0 0 30 2 *".into()),
                ..def("x")
            },
        ),
        (
            "tz alone",
            "k",
            ScheduleDef {
                delay_secs: Some(5),
                tz: Some("UTC".into()),
                ..def("x")
            },
        ),
        (
            "past",
            "k",
            ScheduleDef {
                at: Some(now - Duration::seconds(1)),
                ..def("x")
            },
        ),
        (
            "too often",
            "k",
            ScheduleDef {
                every_secs: Some(9),
                ..def("x")
            },
        ),
        (
            "empty text",
            "k",
            ScheduleDef {
                delay_secs: Some(5),
                ..def(" ")
            },
        ),
        (
            "bad key",
            "a key",
            ScheduleDef {
                delay_secs: Some(5),
                ..def("x")
            },
        ),
        (
            "reserved key",
            "approval:t1",
            ScheduleDef {
                delay_secs: Some(5),
                ..def("x")
            },
        ),
    ];
    let before = s.journal.len();
    for (what, key, schedule) in bad {
        let refused = create(&mut s, key, schedule, now);
        assert!(
            matches!(refused, Err(Refusal::InvalidSchedule(_))),
            "{what}: {refused:?}"
        );
    }
    for key in ["one", "two"] {
        create(
            &mut s,
            key,
            ScheduleDef {
                delay_secs: Some(5),
                ..def("x")
            },
            now,
        )
        .unwrap();
    }
    assert_eq!(
        create(
            &mut s,
            "three",
            ScheduleDef {
                delay_secs: Some(5),
                ..def("x")
            },
            now
        ),
        Err(Refusal::TooManySchedules(2))
    );
    assert_eq!(
        s.send(Input::CancelSchedule {
            key: "nope".into(),
            reason: "r".into()
        }),
        Err(Refusal::NoSuchSchedule)
    );
    assert_eq!(s.journal.len(), before + 2);
}

#[test]
fn a_callback_renders_the_agents_template_for_each_occurrence() {
    let mut s = Session::new();
    s.agent.callbacks.insert(
        "report".into(),
        "Write the {{ args.team }} report due {{ due_at }}\
         {% if missed %} ({{ missed }} missed){% endif %}."
            .into(),
    );
    let t0 = t("2026-01-05T10:00:00Z");
    let callback = |args: serde_json::Value| ScheduleDef {
        every_secs: Some(60),
        message: ScheduleMessage {
            text: None,
            callback: Some("report".into()),
            args: Some(args),
        },
        ..def("unused")
    };
    // Refused with nothing journaled: an unknown callback, arguments that are not an object,
    // a template that names an argument not given, both a text and a callback.
    let before = s.journal.len();
    let unknown = ScheduleDef {
        message: ScheduleMessage {
            callback: Some("audit".into()),
            ..ScheduleMessage::text("x")
        },
        ..callback(json!({}))
    };
    for (bad, why) in [
        (unknown, "exactly one of"),
        (callback(json!(["ops"])), "must be a JSON object"),
        (callback(json!({"group": "ops"})), "does not render"),
    ] {
        match create(&mut s, "bad", bad, t0) {
            Err(Refusal::InvalidSchedule(message)) => assert!(message.contains(why), "{message}"),
            other => panic!("{other:?}"),
        }
    }
    let mut nameless = callback(json!({}));
    nameless.message.callback = Some("audit".into());
    assert!(matches!(
        create(&mut s, "bad", nameless, t0),
        Err(Refusal::InvalidSchedule(m)) if m.contains("no callback `audit` (it has: report)")
    ));
    assert_eq!(s.journal.len(), before);

    create(&mut s, "weekly", callback(json!({"team": "ops"})), t0).unwrap();
    let from = s.journal.len();
    due(&mut s, t0 + Duration::seconds(185)).unwrap();
    assert_eq!(
        s.journal[from + 1].to_parts().1,
        json!({
            "text": "Write the ops report due 2026-01-05T10:01:00Z (2 missed).",
            "client_id": null,
            "schedule": "weekly"
        })
    );
    finish_turn(&mut s, "m1");

    // The callback left the configuration: the schedule is cancelled when it comes due.
    s.agent.callbacks.clear();
    let from = s.journal.len();
    due(&mut s, t0 + Duration::seconds(245)).unwrap();
    assert_eq!(
        s.journal[from..]
            .iter()
            .map(|e| e.to_parts())
            .collect::<Vec<_>>(),
        [(
            "schedule_cancelled".to_string(),
            json!({"key": "weekly", "reason": "its callback `report` is no longer configured"})
        )]
    );
    assert!(s.state.schedules.is_empty());
}

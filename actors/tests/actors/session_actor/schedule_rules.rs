//! Schedule rules through the session actor, on SQLite and PostgreSQL: re-creating
//! a schedule under its key with the same definition journals nothing, another definition is a
//! conflict unless replaced; the catch-up modes on a real store with an injected clock. The
//! decision check passes on every journal these record (`mid_turn` holds the interrupt and
//! steering tests, which share these helpers).

use chrono::{DateTime, Duration as Span, Utc};
use serde_json::Value;
use stead_actors::session::SessionError;
use stead_actors::{CatchUp, MessageMode, Refusal, ScheduleDef, ScheduleState, TranscriptEntry};
use stead_persistence::{Backend, ScheduleQuery};
use stead_testkit::db;

use super::schedules::{schedule, t, FakeClock};
use super::*;

stead_testkit::both_backends!(
    recreating_a_schedule_by_key_is_idempotent_and_replace_redefines_it,
    missed_occurrences_follow_the_catch_up_rule_on_a_real_store,
);

/// No webhook listens here: the tests never call `delete_records`.
pub(super) const NOWHERE: &str = "http://127.0.0.1:9";

pub(super) fn create_schedule(
    key: &str,
    def: ScheduleDef,
    replace: bool,
    now: DateTime<Utc>,
) -> Input {
    Input::CreateSchedule {
        key: key.into(),
        def: Box::new(def),
        replace,
        now,
    }
}

/// Sends a user message with `mode` and waits for its commit.
pub(super) async fn say_with(
    registry: &SessionRegistry,
    id: uuid::Uuid,
    text: &str,
    mode: MessageMode,
) {
    registry
        .send(
            id,
            Input::UserMessage {
                text: text.into(),
                client_id: None,
                mode: Some(mode),
                attachments: Vec::new(),
            },
        )
        .await
        .unwrap();
}

/// The session's journal as `(kind, payload)`, by value.
pub(super) async fn journal(store: &Arc<dyn JournalStore>, id: uuid::Uuid) -> Vec<(String, Value)> {
    store
        .read(id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.payload))
        .collect()
}

/// The journal once `turns` turns have finished, the last event ending one (up to 10 s).
pub(super) async fn after_turns(
    store: &Arc<dyn JournalStore>,
    id: uuid::Uuid,
    turns: usize,
) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    for _ in 0..500 {
        events = journal(store, id).await;
        let finished = events.iter().filter(|(k, _)| k == "turn_finished").count();
        if finished >= turns && events.last().is_some_and(|(k, _)| k == "turn_finished") {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kinds: Vec<&String> = events.iter().map(|(k, _)| k).collect();
    panic!("session {id}: {turns} turns did not finish; journal: {kinds:?}");
}

pub(super) fn kinds_of(events: &[(String, Value)]) -> Vec<String> {
    events.iter().map(|(kind, _)| kind.clone()).collect()
}

/// The schedule events and user messages of a journal, typed.
pub(super) fn scheduling(events: &[(String, Value)]) -> Vec<SessionEvent> {
    events
        .iter()
        .filter(|(kind, _)| kind.starts_with("schedule_") || kind == "user_message")
        .map(|(kind, payload)| SessionEvent::from_parts(kind, payload).unwrap())
        .collect()
}

/// The journal by value, less what varies from run to run: a model call's figures and a
/// tool's key and result (their call id, tool and text stay).
pub(super) fn stable(events: Vec<(String, Value)>) -> Vec<(String, Value)> {
    events
        .into_iter()
        .map(|(kind, p)| {
            let payload = match kind.as_str() {
                "model_call_finished" => json!({
                    "call_id": p["call_id"],
                    "text": p["text"],
                    "tool_calls": p["tool_calls"],
                }),
                "tool_call_started" | "tool_call_finished" => {
                    json!({"call_id": p["call_id"], "tool": p["tool"]})
                }
                _ => p,
            };
            (kind, payload)
        })
        .collect()
}

/// `(key, next_due_at)` of the session's rows in the due index.
pub(super) async fn due_rows(
    store: &Arc<dyn JournalStore>,
    id: uuid::Uuid,
) -> Vec<(String, DateTime<Utc>)> {
    store
        .list_schedules(&ScheduleQuery {
            scope: stead_persistence::Scope::Installation,
            session_id: Some(id),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.key, row.next_due_at))
        .collect()
}

/// The decision check over the session's journal as the store holds it.
pub(super) async fn check(
    store: &Arc<dyn JournalStore>,
    registry: &SessionRegistry,
    id: uuid::Uuid,
) {
    let events = store.read(id, 0, 1000).await.unwrap();
    let ops = registry.agent("ops").unwrap();
    let report = stead_actors::replay::check(id, &json!({}), &events, &ops.rules).unwrap();
    assert_eq!(report.divergence, None, "session {id}");
    assert!(report.decisions > 0, "session {id}");
}

pub(super) fn event(kind: &str, payload: Value) -> (String, Value) {
    (kind.to_string(), payload)
}

pub(super) fn model_call_started(call_id: &str) -> (String, Value) {
    event(
        "model_call_started",
        json!({"call_id": call_id, "route": "default", "model": "default"}),
    )
}

/// A user message's event: with `mode` when it interrupted or steered a turn.
pub(super) fn message(text: &str, mode: Option<&str>) -> (String, Value) {
    let mut payload = json!({"text": text, "client_id": null});
    if let Some(mode) = mode {
        payload["mode"] = json!(mode);
    }
    event("user_message", payload)
}

/// A model call's answer without tool calls (as [`stable`] keeps it), which ends the turn.
pub(super) fn answered(call_id: &str, text: &str) -> [(String, Value); 3] {
    [
        event(
            "model_call_finished",
            json!({"call_id": call_id, "text": text, "tool_calls": []}),
        ),
        event("assistant_message", json!({"text": text})),
        event("turn_finished", json!({"reason": "completed"})),
    ]
}

pub(super) fn user(text: &str) -> TranscriptEntry {
    TranscriptEntry::User {
        text: text.into(),
        attachments: Vec::new(),
    }
}

async fn recreating_a_schedule_by_key_is_idempotent_and_replace_redefines_it(backend: Backend) {
    let t0 = t("2026-08-01T09:00:00Z");
    let at = |secs: i64| t0 + Span::seconds(secs);
    let db = db::open(backend).await;
    let store = db.store.clone();
    let model = ScriptedModel::new(vec![]);
    let registry = SessionRegistry::new(store.clone(), model, vec![agent(NOWHERE)]);
    let id = new_session(&store).await;
    let every = |secs: u64| ScheduleDef {
        every_secs: Some(secs),
        ..schedule("check the queue")
    };
    // `every(secs)` made at `from`, as journaled and as folded.
    let created = |secs: u64, from: DateTime<Utc>| SessionEvent::ScheduleCreated {
        key: "check".into(),
        schedule: every(secs),
        created_at: from,
        next_due_at: Some(from + Span::seconds(secs as i64)),
    };
    let folded = |secs: u64, from: DateTime<Utc>| ScheduleState {
        def: every(secs),
        created_at: from,
        next_due_at: Some(from + Span::seconds(secs as i64)),
        fired: 0,
    };
    let send = |def: ScheduleDef, replace: bool, now: DateTime<Utc>| {
        registry.send(id, create_schedule("check", def, replace, now))
    };
    send(every(300), false, t0).await.unwrap();
    let first = journal(&store, id).await;
    assert_eq!(
        (first.len(), scheduling(&first)),
        (1, vec![created(300, t0)])
    );
    let existing = registry.state(id).await.unwrap().schedules["check"].clone();
    assert_eq!(existing, folded(300, t0));

    // The same definition again, later (an agent re-creating its schedules at start), with or
    // without `replace`: the existing schedule stands, and nothing is journaled.
    for replace in [false, true] {
        assert_eq!(
            send(every(300), replace, at(2)).await,
            Err(SessionError::Refused(Refusal::ScheduleExists)),
            "replace: {replace}"
        );
    }
    assert_eq!(journal(&store, id).await, first);
    let state = registry.state(id).await.unwrap();
    assert_eq!(state.schedules["check"], existing);
    assert_eq!(due_rows(&store, id).await, [("check".to_string(), at(300))]);

    // Another definition under the key: a conflict, nothing journaled.
    assert_eq!(
        send(every(600), false, at(5)).await,
        Err(SessionError::Refused(Refusal::ScheduleConflict))
    );
    assert_eq!(journal(&store, id).await, first);
    assert_eq!(due_rows(&store, id).await, [("check".to_string(), at(300))]);

    // With `replace`: the new definition, from the instant of the replace.
    send(every(600), true, at(10)).await.unwrap();
    let replaced = journal(&store, id).await;
    assert_eq!(&replaced[..1], &first[..]);
    assert_eq!(
        (replaced.len(), scheduling(&replaced[1..])),
        (2, vec![created(600, at(10))])
    );
    let state = registry.state(id).await.unwrap();
    assert_eq!(state.schedules["check"], folded(600, at(10)));
    assert_eq!(due_rows(&store, id).await, [("check".to_string(), at(610))]);
    check(&store, &registry, id).await;
    registry.stop_all();
}

async fn missed_occurrences_follow_the_catch_up_rule_on_a_real_store(backend: Backend) {
    let t0 = t("2026-02-01T00:00:00Z");
    let at = |secs: i64| t0 + Span::seconds(secs);
    // Down for ten minutes: the minutely occurrences at +60 … +600 were missed.
    let now = at(601);
    let db = db::open(backend).await;
    let store = db.store.clone();
    let model = Arc::new(ScriptedModel::respond(|_| ("ok".to_string(), vec![])));
    let registry = SessionRegistry::new(store.clone(), model, vec![agent(NOWHERE)]);
    let clock = FakeClock::at(t0);
    let scheduler = clock.scheduler(&registry);
    let every = |catch_up: CatchUp, secs: u64| ScheduleDef {
        every_secs: Some(secs),
        catch_up,
        ..schedule("tick")
    };
    let mut ids = Vec::new();
    // An hourly schedule 3 h 2 min behind: none of its occurrences is within the grace.
    let hourly_from = now - Span::seconds(3 * 3600 + 120);
    for (key, def, from) in [
        ("tick", every(CatchUp::One, 60), t0),
        ("tick", every(CatchUp::All, 60), t0),
        ("tick", every(CatchUp::Skip, 60), t0),
        ("hourly", every(CatchUp::Skip, 3600), hourly_from),
    ] {
        let id = new_session(&store).await;
        registry
            .send(id, create_schedule(key, def, false, from))
            .await
            .unwrap();
        ids.push(id);
    }
    let (one, all, skip, hourly) = (ids[0], ids[1], ids[2], ids[3]);

    clock.set(now);
    let pass = scheduler.run_due().await.unwrap();
    assert_eq!((pass.due, pass.fired, pass.deferred), (4, 4, 0));
    // `all` keeps one firing queued at a time (docs/schedules.md, "Limits"): its later
    // occurrences stay due and fire, pass after pass, as its turns end.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while fired_count(&store, all).await < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "`all` never fired ten"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        scheduler.run_due().await.unwrap();
    }
    // Every row moved past now: another pass finds nothing due.
    assert_eq!(scheduler.run_due().await.unwrap().due, 0);

    let created = |key: &str, def: ScheduleDef, from: DateTime<Utc>, secs: i64| {
        SessionEvent::ScheduleCreated {
            key: key.into(),
            schedule: def,
            created_at: from,
            next_due_at: Some(from + Span::seconds(secs)),
        }
    };
    let fired = |due: i64, next: i64, missed: u64| SessionEvent::ScheduleFired {
        key: "tick".into(),
        due_at: at(due),
        at: now,
        next_due_at: Some(at(next)),
        missed,
    };
    let tick = SessionEvent::UserMessage {
        text: "tick".into(),
        client_id: None,
        mode: None,
        schedule: Some("tick".into()),
        attachments: Vec::new(),
    };
    let turn = [
        "model_call_started",
        "model_call_finished",
        "assistant_message",
        "turn_finished",
    ];

    // `one`: the first missed occurrence fires once for all ten; one message, one turn.
    let events = after_turns(&store, one, 1).await;
    assert_eq!(
        scheduling(&events),
        [
            created("tick", every(CatchUp::One, 60), t0, 60),
            fired(60, 660, 9),
            tick.clone()
        ]
    );
    assert_eq!(&kinds_of(&events)[3..], turn);

    // `all`: each missed occurrence fires, in order, each with a turn of its own.
    let events = after_turns(&store, all, 10).await;
    let mut want = vec![created("tick", every(CatchUp::All, 60), t0, 60)];
    for k in 1..=10 {
        want.push(fired(60 * k, 60 * (k + 1), 0));
        want.push(tick.clone());
    }
    assert_eq!(scheduling(&events), want);
    let turns = kinds_of(&events)
        .iter()
        .filter(|k| **k == "turn_finished")
        .count();
    assert_eq!(turns, 10);

    // `skip`: what is over a minute late is dropped; the latest occurrence within the minute
    // fires, counting the nine before it.
    let events = after_turns(&store, skip, 1).await;
    assert_eq!(
        scheduling(&events),
        [
            created("tick", every(CatchUp::Skip, 60), t0, 60),
            fired(600, 660, 9),
            tick.clone()
        ]
    );
    assert_eq!(&kinds_of(&events)[3..], turn);

    // `skip`, hourly: the three missed are all over the grace: skipped, no message, no turn.
    let events = journal(&store, hourly).await;
    assert_eq!(
        scheduling(&events),
        [
            created("hourly", every(CatchUp::Skip, 3600), hourly_from, 3600),
            SessionEvent::ScheduleSkipped {
                key: "hourly".into(),
                at: now,
                missed: 3,
                next_due_at: Some(hourly_from + Span::seconds(4 * 3600)),
            }
        ]
    );
    assert_eq!(events.len(), 2);

    // The fold and the due index agree on what comes next.
    for (id, key, fired_count, next) in [
        (one, "tick", 1, at(660)),
        (all, "tick", 10, at(660)),
        (skip, "tick", 1, at(660)),
        (hourly, "hourly", 0, hourly_from + Span::seconds(4 * 3600)),
    ] {
        let state = registry.state(id).await.unwrap();
        assert_eq!(state.schedules[key].fired, fired_count, "{key} of {id}");
        assert_eq!(
            state.schedules[key].next_due_at,
            Some(next),
            "{key} of {id}"
        );
        assert!(state.turn.is_none() && state.queued.is_empty());
        assert_eq!(due_rows(&store, id).await, [(key.to_string(), next)]);
        check(&store, &registry, id).await;
    }
    registry.stop_all();
}

/// `schedule_fired` events in `id`'s journal.
async fn fired_count(store: &Arc<dyn JournalStore>, id: uuid::Uuid) -> usize {
    journal(store, id)
        .await
        .iter()
        .filter(|(kind, _)| kind == "schedule_fired")
        .count()
}

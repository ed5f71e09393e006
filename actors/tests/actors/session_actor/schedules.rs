//! Schedules through the session actor and the scheduler, on SQLite and PostgreSQL, with an
//! injected clock (passes driven by `run_due`, no waiting for due times): a delay fires once
//! and wakes a passivated session; a cron in New York fires at nine local across the spring
//! change; two nodes on one database fire each occurrence once; an approval's expiry keeps its
//! deadline across a restart.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Duration as Span, Utc};
use stead_actors::session::{Lifecycle, Scheduler, SchedulerOptions};
use stead_actors::{CatchUp, ScheduleDef, ScheduleMessage};
use stead_persistence::{Backend, ScheduleOwner, ScheduleQuery};
use stead_testkit::db;

use super::*;

stead_testkit::both_backends!(
    a_delay_fires_once_and_wakes_a_passivated_session,
    a_cron_in_new_york_fires_at_nine_local,
    two_nodes_fire_each_occurrence_once,
    an_approval_expiry_keeps_its_deadline_across_a_restart,
);

/// A clock the test sets.
pub(super) struct FakeClock(Arc<AtomicI64>);

impl FakeClock {
    pub(super) fn at(t: DateTime<Utc>) -> Self {
        FakeClock(Arc::new(AtomicI64::new(t.timestamp_micros())))
    }
    pub(super) fn set(&self, t: DateTime<Utc>) {
        self.0.store(t.timestamp_micros(), Ordering::SeqCst);
    }
    pub(super) fn scheduler(&self, registry: &SessionRegistry) -> Arc<Scheduler> {
        let micros = self.0.clone();
        Scheduler::new(
            registry.clone(),
            SchedulerOptions {
                clock: Arc::new(move || {
                    DateTime::from_timestamp_micros(micros.load(Ordering::SeqCst)).unwrap()
                }),
                ..Default::default()
            },
        )
    }
}

pub(super) fn t(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

pub(super) fn quick_passivation() -> Lifecycle {
    Lifecycle {
        passivate_after: Duration::from_millis(100),
        ..Lifecycle::default()
    }
}

pub(super) fn schedule(text: &str) -> ScheduleDef {
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

async fn create(
    registry: &SessionRegistry,
    id: uuid::Uuid,
    key: &str,
    def: ScheduleDef,
    now: DateTime<Utc>,
) {
    registry
        .send(
            id,
            Input::CreateSchedule {
                key: key.into(),
                def: Box::new(def),
                replace: false,
                now,
            },
        )
        .await
        .unwrap();
}

async fn fired_due_times(store: &Arc<dyn JournalStore>, id: uuid::Uuid) -> Vec<String> {
    store
        .read(id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "schedule_fired")
        .map(|e| e.payload["due_at"].as_str().unwrap().to_string())
        .collect()
}

async fn a_delay_fires_once_and_wakes_a_passivated_session(backend: Backend) {
    let t0 = t("2026-06-01T12:00:00Z");
    let db = db::open(backend).await;
    let store = db.store.clone();
    let model = ScriptedModel::new(vec![("Time to stand up.", vec![])]);
    let registry = SessionRegistry::new(store.clone(), model, vec![agent("http://127.0.0.1:9")])
        .with_lifecycle(quick_passivation());
    let clock = FakeClock::at(t0);
    let scheduler = clock.scheduler(&registry);
    let id = new_session(&store).await;
    create(
        &registry,
        id,
        "stand",
        ScheduleDef {
            delay_secs: Some(60),
            ..schedule("stand up")
        },
        t0,
    )
    .await;
    let rows = store
        .list_schedules(&ScheduleQuery {
            scope: stead_persistence::Scope::Installation,
            session_id: Some(id),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].next_due_at, t0 + Span::seconds(60));
    assert!(
        eventually(|| !registry.is_live(id)).await,
        "the idle session passivates"
    );

    clock.set(t0 + Span::seconds(59));
    assert_eq!(scheduler.run_due().await.unwrap().due, 0);
    clock.set(t0 + Span::seconds(61));
    let pass = scheduler.run_due().await.unwrap();
    assert_eq!((pass.due, pass.fired), (1, 1));
    // The row is gone; later passes find nothing, and a wake-up for nothing journals nothing.
    clock.set(t0 + Span::seconds(3600));
    assert_eq!(scheduler.run_due().await.unwrap().due, 0);
    let journaled = store.read(id, 0, 1000).await.unwrap().len();
    assert_eq!(
        registry
            .send(
                id,
                Input::SchedulesDue {
                    now: t0 + Span::seconds(3600)
                }
            )
            .await,
        Err(stead_actors::session::SessionError::Refused(
            stead_actors::Refusal::NothingDue
        ))
    );
    let mut frames = registry.subscribe(id).await.unwrap();
    if journal_kinds(&store, id).await.last().map(String::as_str) != Some("turn_finished") {
        wait_for(&mut frames, "turn_finished").await;
    }
    let kinds = journal_kinds(&store, id).await;
    assert_eq!(
        kinds,
        [
            "schedule_created",
            "schedule_fired",
            "user_message",
            "model_call_started",
            "model_call_finished",
            "assistant_message",
            "turn_finished"
        ]
    );
    assert!(journaled <= kinds.len());
    assert_eq!(fired_due_times(&store, id).await, ["2026-06-01T12:01:00Z"]);
    registry.stop_all();
}

async fn a_cron_in_new_york_fires_at_nine_local(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.store.clone();
    let model = ScriptedModel::respond(|_| ("Morning.".to_string(), vec![]));
    let registry = SessionRegistry::new(
        store.clone(),
        Arc::new(model),
        vec![agent("http://127.0.0.1:9")],
    );
    let created = t("2025-03-07T20:00:00Z");
    let clock = FakeClock::at(created);
    let scheduler = clock.scheduler(&registry);
    let id = new_session(&store).await;
    let nine = ScheduleDef {
        cron: Some("0 9 * * *".into()),
        tz: Some("America/New_York".into()),
        ..schedule("morning report")
    };
    create(&registry, id, "nine", nine, created).await;
    // New York moves from UTC-5 to UTC-4 on 2025-03-09 at 02:00 local.
    for (now, fires) in [
        ("2025-03-08T13:59:59Z", false),
        ("2025-03-08T14:00:00Z", true),
        ("2025-03-09T12:59:59Z", false),
        ("2025-03-09T13:00:00Z", true),
        ("2025-03-10T12:59:00Z", false),
    ] {
        clock.set(t(now));
        let pass = scheduler.run_due().await.unwrap();
        assert_eq!(pass.fired == 1, fires, "at {now}: {pass:?}");
        // Let the turn end before the next occurrence.
        let mut frames = registry.subscribe(id).await.unwrap();
        if registry.state(id).await.unwrap().turn.is_some() {
            wait_for(&mut frames, "turn_finished").await;
        }
    }
    assert_eq!(
        fired_due_times(&store, id).await,
        ["2025-03-08T14:00:00Z", "2025-03-09T13:00:00Z"]
    );
    let rows = store
        .due_schedules(t("2030-01-01T00:00:00Z"), 10)
        .await
        .unwrap();
    assert_eq!(rows[0].next_due_at, t("2025-03-10T13:00:00Z"));
    registry.stop_all();
}

async fn two_nodes_fire_each_occurrence_once(backend: Backend) {
    let t0 = t("2026-07-01T00:00:00Z");
    let db = db::open(backend).await;
    let store = db.store.clone();
    let model = || Arc::new(ScriptedModel::respond(|_| ("ok".to_string(), vec![])));
    let a = SessionRegistry::new(store.clone(), model(), vec![agent("http://127.0.0.1:9")])
        .with_node("node-a")
        .with_lifecycle(quick_passivation());
    let b = SessionRegistry::new(store.clone(), model(), vec![agent("http://127.0.0.1:9")])
        .with_node("node-b")
        .with_lifecycle(quick_passivation());
    let clock = FakeClock::at(t0);
    let (on_a, on_b) = (clock.scheduler(&a), clock.scheduler(&b));
    let mut ids = Vec::new();
    for _ in 0..12 {
        let id = new_session(&store).await;
        create(
            &a,
            id,
            "minutely",
            ScheduleDef {
                every_secs: Some(60),
                ..schedule("tick")
            },
            t0,
        )
        .await;
        ids.push(id);
    }
    for round in 1..=2 {
        assert!(eventually(|| ids.iter().all(|id| !a.is_live(*id) && !b.is_live(*id))).await);
        clock.set(t0 + Span::seconds(60 * round + 1));
        // Both nodes see every row due at once; each keeps trying until nothing is due.
        for _ in 0..20 {
            let (pa, pb) = tokio::join!(on_a.run_due(), on_b.run_due());
            let (pa, pb) = (pa.unwrap(), pb.unwrap());
            if pa.due == 0 && pb.due == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        for id in &ids {
            assert_eq!(
                fired_due_times(&store, *id).await.len() as i64,
                round,
                "session {id}"
            );
        }
    }
    a.stop_all();
    b.stop_all();
}

async fn an_approval_expiry_keeps_its_deadline_across_a_restart(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.store.clone();
    let (url, hits) = ops::webhook().await;
    let gated = || {
        let mut ops = agent(&url);
        ops.rules.approval_timeout = Some(Duration::from_secs(3600));
        ops
    };
    let script = ScriptedModel::new(vec![(
        "",
        vec![("delete_records", json!({"table": "users"}))],
    )]);
    let registry = SessionRegistry::new(store.clone(), script, vec![gated()]);
    let id = new_session(&store).await;
    let mut frames = registry.subscribe(id).await.unwrap();
    say(&registry, id, "clean").await;
    wait_for(&mut frames, "approval_requested").await;
    let owner = ScheduleOwner::Session(id);
    let row = |rows: Vec<stead_persistence::ScheduleRow>| {
        rows.into_iter()
            .find(|r| r.owner == owner && r.key == "approval:t1")
            .unwrap()
    };
    let before = row(store
        .due_schedules(Utc::now() + Span::days(1), 10)
        .await
        .unwrap());
    assert!(before.next_due_at > Utc::now() + Span::minutes(59));

    // A restart: the new activation keeps the row's deadline.
    registry.stop_all();
    drop(registry);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after_restart = ScriptedModel::new(vec![("Nobody approved it.", vec![])]);
    let registry = SessionRegistry::new(store.clone(), after_restart, vec![gated()]);
    assert_eq!(
        registry.state(id).await.unwrap().pending_approvals().len(),
        1
    );
    let after = row(store
        .due_schedules(Utc::now() + Span::days(1), 10)
        .await
        .unwrap());
    assert_eq!(after.next_due_at, before.next_due_at);

    let clock = FakeClock::at(before.next_due_at - Span::seconds(1));
    let scheduler = clock.scheduler(&registry);
    assert_eq!(scheduler.run_due().await.unwrap().due, 0);
    clock.set(before.next_due_at);
    assert_eq!(scheduler.run_due().await.unwrap().fired, 1);
    let journal = store.read(id, 0, 100).await.unwrap();
    let decided = journal
        .iter()
        .find(|e| e.kind == "approval_decided")
        .unwrap();
    assert_eq!(decided.payload["reason"], "expired");
    assert!(hits.keys().is_empty(), "an expired call never runs");
    assert_eq!(store.next_schedule_due().await.unwrap(), None);
    registry.stop_all();
}

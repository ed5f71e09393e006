//! Schedules that target an agent, through the scheduler on SQLite and PostgreSQL with an
//! injected clock: two nodes passing over the same due rows start one session per occurrence
//! (catch-up `all` fires each missed one), each with the schedule's message once; and a retry
//! of an occurrence whose row was not advanced (a crash between starting its session and the
//! compare-and-set) finds the same session and delivers nothing twice.

use chrono::Duration as Span;
use stead_actors::agent_schedules::{occurrence_session, plan_create, AgentSchedule};
use stead_actors::{CatchUp, ScheduleDef};
use stead_persistence::{Backend, ScheduleOwner, ScheduleQuery, SessionQuery};
use stead_testkit::db;

use super::schedules::{quick_passivation, schedule, t, FakeClock};
use super::*;

stead_testkit::both_backends!(an_agents_schedule_starts_one_session_per_occurrence);

/// The user messages of a session's journal.
async fn messages(store: &Arc<dyn JournalStore>, id: uuid::Uuid) -> Vec<serde_json::Value> {
    store
        .read(id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "user_message")
        .map(|e| e.payload)
        .collect()
}

/// The sessions of agent `ops`, newest first.
async fn ops_sessions(store: &Arc<dyn JournalStore>) -> Vec<stead_persistence::Session> {
    store
        .list_sessions(&SessionQuery {
            scope: stead_persistence::Scope::Installation,
            agent: Some("ops".into()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .sessions
}

/// Agent `ops`'s own schedules.
async fn ops_schedules(store: &Arc<dyn JournalStore>) -> Vec<stead_persistence::ScheduleRow> {
    store
        .list_schedules(&ScheduleQuery {
            scope: stead_persistence::Scope::Installation,
            agent: Some("ops".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
}

async fn an_agents_schedule_starts_one_session_per_occurrence(backend: Backend) {
    let t0 = t("2026-07-01T00:00:00Z");
    let db = db::open(backend).await;
    let store = db.store.clone();
    let model = || {
        Arc::new(ScriptedModel::respond(|_| {
            ("Report sent.".to_string(), vec![])
        }))
    };
    let a = SessionRegistry::new(store.clone(), model(), vec![agent("http://127.0.0.1:9")])
        .with_node("node-a")
        .with_lifecycle(quick_passivation());
    let b = SessionRegistry::new(store.clone(), model(), vec![agent("http://127.0.0.1:9")])
        .with_node("node-b")
        .with_lifecycle(quick_passivation());
    let clock = FakeClock::at(t0);
    let (on_a, on_b) = (clock.scheduler(&a), clock.scheduler(&b));
    let def = ScheduleDef {
        every_secs: Some(60),
        catch_up: CatchUp::All,
        ..schedule("Send the report")
    };
    let row = plan_create(
        stead_persistence::DEFAULT_PROJECT,
        "ops",
        "report",
        def,
        false,
        Some("key:ci".into()),
        None,
        0,
        &agent("http://127.0.0.1:9").rules,
        t0,
    )
    .unwrap();
    store.put_schedules(&[row]).await.unwrap();

    // Two occurrences were missed (the nodes were down): both start, once, whoever passes.
    clock.set(t0 + Span::seconds(150));
    for _ in 0..20 {
        let (pa, pb) = tokio::join!(on_a.run_due(), on_b.run_due());
        if pa.unwrap().due == 0 && pb.unwrap().due == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let sessions = ops_sessions(&store).await;
    let mut ids: Vec<uuid::Uuid> = sessions.iter().map(|s| s.id).collect();
    ids.sort();
    let mut want: Vec<uuid::Uuid> = [60, 120]
        .iter()
        .map(|s| {
            occurrence_session(
                &ScheduleOwner::installation_agent("ops"),
                "report",
                t0,
                t0 + Span::seconds(*s),
            )
        })
        .collect();
    want.sort();
    assert_eq!(ids, want);
    for session in &sessions {
        let due_at = session.metadata["schedule"]["due_at"].as_str().unwrap();
        assert_eq!(session.metadata["schedule"]["key"], "report");
        let sent = messages(&store, session.id).await;
        assert_eq!(sent.len(), 1, "{}", session.id);
        assert_eq!(sent[0]["text"], "Send the report");
        assert_eq!(
            sent[0]["client_id"],
            format!("schedule:report:{}", t(due_at).to_rfc3339())
        );
        let created = store.read(session.id, 0, 1).await.unwrap();
        assert_eq!(created[0].payload["principal"], "key:ci");
        let mut answered = false;
        for _ in 0..300 {
            if journal_kinds(&store, session.id)
                .await
                .contains(&"turn_finished".to_string())
            {
                answered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(answered, "the occurrence's turn runs to its end");
    }
    let owner = ScheduleOwner::installation_agent("ops");
    let rows = ops_schedules(&store).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].next_due_at, t0 + Span::seconds(180));
    assert_eq!(AgentSchedule::from_row(&rows[0]).unwrap().created_at, t0);

    // A crash after the 120 s occurrence's session started but before its row moved: the
    // retry finds the same session and sends nothing again.
    let mut lost = rows[0].clone();
    lost.next_due_at = t0 + Span::seconds(120);
    store.put_schedules(&[lost]).await.unwrap();
    let pass = on_b.run_due().await.unwrap();
    assert_eq!(pass.due, 1);
    let again = occurrence_session(
        &ScheduleOwner::installation_agent("ops"),
        "report",
        t0,
        t0 + Span::seconds(120),
    );
    assert_eq!(messages(&store, again).await.len(), 1);
    let total = ops_sessions(&store).await.len();
    assert_eq!(total, 2);
    let rows = ops_schedules(&store).await;
    assert_eq!(rows[0].next_due_at, t0 + Span::seconds(180));
    assert!(store.delete_schedule(&owner, "report").await.unwrap());
    a.stop_all();
    b.stop_all();
}

//! Crash recovery on a real process: a child process (this test binary, re-run with the ignored
//! `crash_child` test selected) drives session actors — a scripted model double calls an
//! idempotent and a non-idempotent webhook tool — and is killed with SIGKILL at random moments.
//! After every kill the journal is checked; after the last one, the parent activates every
//! session and lets each turn finish. Tool effects are counted at a real HTTP endpoint (a test
//! double of the user's service) by `Idempotency-Key`.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use serde_json::json;
use stead_actors::session::{Agent, SessionRegistry};
use stead_actors::tools::{ToolInfo, WebhookTool};
use stead_actors::{
    AgentRules, ApprovalPolicy, Input, SessionEvent, SessionState, ToolRules, TranscriptEntry,
};
use stead_persistence::{Backend, DatabaseUrl, JournalStore};
use stead_testkit::crash::{child_process, child_runtime, join_list, sigkill, split_list};
use stead_testkit::db::{self, open_url as open};
use stead_testkit::model::ScriptedModel;
use stead_testkit::webhook::Webhook;
use uuid::Uuid;

const TRIALS: usize = 60;
const SESSIONS: usize = 4;
const CHILD_URL: &str = "CRASH_ACTORS_DATABASE_URL";
const CHILD_ENDPOINT: &str = "CRASH_ACTORS_ENDPOINT";
const CHILD_SESSIONS: &str = "CRASH_ACTORS_SESSIONS";
/// When set, every tool needs approval (the child parks).
const CHILD_GATED: &str = "CRASH_ACTORS_GATED";

/// Deterministic model double: a user message asks for a tool (alternating idempotent and
/// not), a tool result gets a final answer; 5 ms per call.
fn scripted() -> Arc<ScriptedModel> {
    let model = ScriptedModel::respond(|request| {
        let users = request
            .transcript
            .iter()
            .filter(|e| matches!(e, TranscriptEntry::User { .. }))
            .count();
        match request.transcript.last() {
            Some(TranscriptEntry::User { .. }) => {
                let tool = if users % 2 == 0 { "charge" } else { "record" };
                (
                    String::new(),
                    vec![(tool.to_string(), json!({ "turn": users }))],
                )
            }
            _ => (format!("done {users}"), vec![]),
        }
    });
    Arc::new(model.with_delay(Duration::from_millis(5)))
}

fn agent(endpoint: &str) -> Agent {
    let mut tools: stead_actors::session::AgentTools = Default::default();
    for (name, idempotent) in [("record", true), ("charge", false)] {
        tools.insert(
            name.into(),
            Arc::new(WebhookTool {
                info: ToolInfo {
                    name: name.into(),
                    description: String::new(),
                    approval: ApprovalPolicy::Never,
                    idempotent,
                },
                url: format!("{endpoint}/{name}"),
                headers: Default::default(),
                parameters: json!({ "type": "object" }),
                timeout: Duration::from_secs(5),
                attempts: 3,
                client: reqwest::Client::new(),
            }),
        );
    }
    let rules = AgentRules {
        route: "default".into(),
        max_steps: 4,
        tools: tools
            .iter()
            .map(|(n, t)| {
                (
                    n.clone(),
                    ToolRules {
                        approval: ApprovalPolicy::Never,
                        idempotent: t.idempotent(),
                        arguments: Default::default(),
                        approver: Default::default(),
                        builtin: None,
                    },
                )
            })
            .collect(),
        approval_timeout: None,
        dynamic: Vec::new(),
        message_mode: Default::default(),
        schedules: Default::default(),
        callbacks: Default::default(),
        delegation: Default::default(),
        context: Default::default(),
    };
    Agent {
        name: "crash".into(),
        system_prompt: String::new(),
        rules,
        tools,
        dynamic: None,
        guardrails: None,
    }
}

/// The user's service double (the tools post to `/{tool}`); its deliveries as `(tool, key)`.
fn deliveries(service: &Webhook) -> Vec<(String, String)> {
    service
        .deliveries()
        .into_iter()
        .map(|d| (d.path.trim_start_matches('/').to_string(), d.key))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sessions_survive_sigkill_without_duplicate_effects() {
    crash_trials(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sessions_survive_sigkill_without_duplicate_effects() {
    crash_trials(Backend::Postgres).await;
}

async fn crash_trials(backend: Backend) {
    let (db, guard) = db::fresh_location(backend).await;
    let service = Webhook::start().await;
    let endpoint = service.base.clone();
    let ids = db::create_sessions(&db, "crash", SESSIONS).await;
    let id_list = join_list(&ids);
    let mut rng = rand::rng();
    for trial in 0..TRIALS {
        let mut child = child_process(module_path!(), "crash_child")
            .env(CHILD_URL, db::url_string(&db))
            .env(CHILD_ENDPOINT, &endpoint)
            .env(CHILD_SESSIONS, &id_list)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(rng.random_range(30..250))).await;
        sigkill(&mut child);
        stead_persistence::scratch::wait_for_other_connections(&db, Duration::from_secs(30))
            .await
            .unwrap();
        let store = open(&db).await;
        for id in &ids {
            check_journal(&store, *id, trial).await;
        }
        store.shutdown().await;
        drop(store);
    }

    // Recovery to the end: activate every session here and let its turns finish.
    let store = open(&db).await;
    let registry = SessionRegistry::new(store.clone(), scripted(), vec![agent(&endpoint)]);
    for id in &ids {
        let mut settled = false;
        for _ in 0..500 {
            if registry.state(*id).await.unwrap().turn.is_none() {
                settled = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(settled, "session {id} finishes its turn after recovery");
        check_journal(&store, *id, TRIALS).await;
    }
    registry.stop_all();

    // Effects: every key belongs to one call; a non-idempotent call is delivered at most once;
    // every finished call was delivered.
    let deliveries = deliveries(&service);
    let mut per_key: HashMap<String, (String, usize)> = HashMap::new();
    for (tool, key) in &deliveries {
        per_key.entry(key.clone()).or_insert((tool.clone(), 0)).1 += 1;
    }
    for (key, (tool, count)) in &per_key {
        if tool == "charge" {
            assert_eq!(
                *count, 1,
                "the non-idempotent call {key} was delivered {count} times"
            );
        }
    }
    let mut finished_calls = 0;
    let mut in_doubt = 0;
    for id in &ids {
        for event in store.read(*id, 0, 100_000).await.unwrap() {
            match SessionEvent::from_parts(&event.kind, &event.payload) {
                Some(SessionEvent::ToolCallFinished { call_id, .. }) => {
                    finished_calls += 1;
                    assert!(
                        per_key.contains_key(&format!("{id}:{call_id}")),
                        "finished call {call_id} was never delivered"
                    );
                }
                Some(SessionEvent::ToolCallFailed { in_doubt: true, .. }) => in_doubt += 1,
                _ => {}
            }
        }
    }
    let redelivered = per_key.values().filter(|(_, count)| *count > 1).count();
    eprintln!(
        "{backend}: {TRIALS} kills, {} deliveries for {} keys, {finished_calls} calls finished, \
         {in_doubt} non-idempotent calls in doubt, {redelivered} idempotent calls re-run with their key",
        deliveries.len(),
        per_key.len()
    );
    assert!(finished_calls > 0, "the loop made progress between kills");
    assert!(
        in_doubt + redelivered > 0,
        "no kill landed inside a tool call: the test is not testing recovery"
    );
    store.shutdown().await;
    guard.cleanup().await;
}

/// The journal folds cleanly, every call has at most one outcome, every model call at most one
/// answer.
async fn check_journal(store: &Arc<dyn JournalStore>, id: Uuid, trial: usize) {
    let events = store.read(id, 0, 100_000).await.unwrap();
    let mut state = SessionState::default();
    let mut outcomes: HashSet<String> = HashSet::new();
    let mut answers: HashSet<String> = HashSet::new();
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.seq, i as i64 + 1, "trial {trial}: gap");
        let typed = SessionEvent::from_parts(&event.kind, &event.payload).expect("known kind");
        match &typed {
            SessionEvent::ToolCallFinished { call_id, .. }
            | SessionEvent::ToolCallFailed { call_id, .. } => {
                assert!(
                    outcomes.insert(call_id.to_string()),
                    "trial {trial}: call {call_id} has two outcomes"
                );
            }
            SessionEvent::ModelCallFinished { call_id, .. }
            | SessionEvent::ModelCallFailed { call_id, .. } => {
                assert!(
                    answers.insert(call_id.to_string()),
                    "trial {trial}: model call {call_id} answered twice"
                );
            }
            _ => {}
        }
        state.apply(event.seq, &typed);
    }
}

/// SIGKILL while parked on an approval, restart, approve: the gated webhook runs exactly once
/// and the turn finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_parked_then_approve_runs_the_tool_once() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let (db, guard) = db::fresh_location(backend).await;
        let service = Webhook::start().await;
        let endpoint = service.base.clone();
        let id = db::create_sessions(&db, "crash", 1).await[0];
        let mut child = child_process(module_path!(), "crash_child")
            .env(CHILD_URL, db::url_string(&db))
            .env(CHILD_ENDPOINT, &endpoint)
            .env(CHILD_SESSIONS, id.to_string())
            .env(CHILD_GATED, "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill it once the session is parked.
        let store = open(&db).await;
        let mut parked = false;
        for _ in 0..1000 {
            let events = store.read(id, 0, 1000).await.unwrap();
            if events.iter().any(|e| e.kind == "approval_requested") {
                parked = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(parked, "{backend}: the child parked on the approval");
        sigkill(&mut child);
        store.shutdown().await;
        drop(store);
        stead_persistence::scratch::wait_for_other_connections(&db, Duration::from_secs(30))
            .await
            .unwrap();
        let store = open(&db).await;
        assert!(
            service.deliveries().is_empty(),
            "nothing ran before the decision"
        );

        // Restart: a new registry finds the session still parked; the decision runs the tool.
        let registry =
            SessionRegistry::new(store.clone(), scripted(), vec![gated_agent(&endpoint)]);
        assert_eq!(
            registry.state(id).await.unwrap().status(),
            "awaiting_approval"
        );
        let call_id = registry.state(id).await.unwrap().turn.unwrap().calls[0]
            .call_id
            .clone();
        registry
            .send(
                id,
                Input::Decision {
                    call_id: call_id.clone(),
                    approved: true,
                    reason: None,
                    decided_by: "ada".into(),
                    scope: stead_actors::ApprovalScope::Once,
                    args_hash: None,
                    overspend_usd: None,
                    may_spend: true,
                },
            )
            .await
            .unwrap();
        let mut finished = false;
        for _ in 0..500 {
            if registry.state(id).await.unwrap().turn.is_none() {
                finished = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(finished, "{backend}: the turn finishes after the approval");
        let deliveries = deliveries(&service);
        assert_eq!(deliveries.len(), 1, "{backend}: exactly one delivery");
        assert_eq!(deliveries[0].1, format!("{id}:{call_id}"));
        registry.stop_all();
        store.shutdown().await;
        guard.cleanup().await;
    }
}

/// The crash agent with every tool gated by approval.
fn gated_agent(endpoint: &str) -> Agent {
    let mut agent = agent(endpoint);
    for rules in agent.rules.tools.values_mut() {
        rules.approval = ApprovalPolicy::Always;
    }
    agent
}

/// The child: keeps every session busy until killed.
#[test]
#[ignore = "run by the crash tests as a child process"]
fn crash_child() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let endpoint = std::env::var(CHILD_ENDPOINT).unwrap();
    let ids: Vec<Uuid> = split_list(&std::env::var(CHILD_SESSIONS).unwrap());
    child_runtime().block_on(async move {
        let store = open(&DatabaseUrl::parse(&url).unwrap()).await;
        let agent = if std::env::var_os(CHILD_GATED).is_some() {
            gated_agent(&endpoint)
        } else {
            agent(&endpoint)
        };
        let registry = SessionRegistry::new(store, scripted(), vec![agent]);
        loop {
            for id in &ids {
                let state = registry.state(*id).await.unwrap();
                let users = state
                    .transcript
                    .iter()
                    .filter(|e| matches!(e, TranscriptEntry::User { .. }))
                    .count();
                if state.turn.is_none() && state.queued.is_empty() {
                    let _ = registry
                        .send(
                            *id,
                            Input::UserMessage {
                                text: format!("turn {users}"),
                                client_id: None,
                                mode: None,
                                attachments: Vec::new(),
                            },
                        )
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
}

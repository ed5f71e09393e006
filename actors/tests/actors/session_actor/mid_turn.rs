//! Messages that arrive mid-turn through the session actor, on SQLite and PostgreSQL (issue
//! 18): an interrupt and a steering message through a live turn, with a model double that
//! holds its calls until the test lets them answer. The decision check passes on every journal
//! these record.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::Value;
use stead_actors::session::{ModelClient, ModelError, ModelRequest};
use stead_actors::{MessageMode, ModelOutput, RequestedCall, TranscriptEntry, Usage};
use stead_persistence::Backend;
use stead_testkit::db;
use stead_testkit::model::Answer;
use tokio::sync::mpsc::UnboundedSender;

use super::schedule_rules::*;
use super::*;

stead_testkit::both_backends!(
    an_interrupt_cancels_the_running_turn_and_runs_ahead_of_the_queue,
    a_steering_message_joins_the_turn_before_its_next_model_call,
);

/// A model double that holds each call until the test lets one more answer through
/// ([`GatedModel::open`]), or until the call is cancelled (it then stops with
/// `ModelError::Cancelled`, as the router's client does). It answers from a script, in order,
/// and keeps the transcript each call was sent.
struct GatedModel {
    gate: tokio::sync::Semaphore,
    script: Mutex<VecDeque<Answer>>,
    sent: Mutex<Vec<Vec<TranscriptEntry>>>,
    cancelled: AtomicUsize,
}

impl GatedModel {
    fn new(script: Vec<(&str, Vec<(&str, Value)>)>) -> Arc<GatedModel> {
        let script = script
            .into_iter()
            .map(|(text, calls)| {
                let calls = calls
                    .into_iter()
                    .map(|(tool, arguments)| (tool.to_string(), arguments))
                    .collect();
                (text.to_string(), calls)
            })
            .collect();
        Arc::new(GatedModel {
            gate: tokio::sync::Semaphore::new(0),
            script: Mutex::new(script),
            sent: Mutex::new(Vec::new()),
            cancelled: AtomicUsize::new(0),
        })
    }

    /// Lets `answers` more calls answer.
    fn open(&self, answers: usize) {
        self.gate.add_permits(answers);
    }

    /// Calls made (answered, held or cancelled).
    fn calls(&self) -> usize {
        self.sent.lock().unwrap().len()
    }

    fn cancelled(&self) -> usize {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Each call's transcript, in call order.
    fn transcripts(&self) -> Vec<Vec<TranscriptEntry>> {
        self.sent.lock().unwrap().clone()
    }
}

#[async_trait]
impl ModelClient for GatedModel {
    async fn complete(
        &self,
        request: ModelRequest,
        deltas: UnboundedSender<String>,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<ModelOutput, ModelError> {
        self.sent
            .lock()
            .unwrap()
            .push(request.transcript.into_iter().collect());
        loop {
            if cancel.is_cancelled() {
                self.cancelled.fetch_add(1, Ordering::SeqCst);
                return Err(ModelError::Cancelled);
            }
            let wait = tokio::time::timeout(Duration::from_millis(10), self.gate.acquire());
            if let Ok(Ok(permit)) = wait.await {
                permit.forget();
                break;
            }
        }
        let (text, tool_calls) = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| ("(script ended)".to_string(), Vec::new()));
        let _ = deltas.send(text.clone());
        Ok(ModelOutput {
            text,
            tool_calls,
            usage: Usage::default(),
            provider: "gated".into(),
            model: "double".into(),
            latency_ms: 1.0,
            ttft_ms: 0.1,
            cost: 0.0,
            guardrails: Vec::new(),
        })
    }
}

async fn an_interrupt_cancels_the_running_turn_and_runs_ahead_of_the_queue(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.store.clone();
    let model = GatedModel::new(vec![("Done.", vec![]), ("Queued one done.", vec![])]);
    let registry = SessionRegistry::new(store.clone(), model.clone(), vec![agent(NOWHERE)]);
    let id = new_session(&store).await;
    say(&registry, id, "slow question").await;
    assert!(
        eventually(|| model.calls() == 1).await,
        "the model call runs"
    );
    say(&registry, id, "queued").await;
    say_with(
        &registry,
        id,
        "stop, do this instead",
        MessageMode::Interrupt,
    )
    .await;
    assert!(
        eventually(|| model.cancelled() == 1).await,
        "the running model call is told to stop"
    );
    model.open(2);
    let events = after_turns(&store, id, 2).await;
    // The cancelled call's outcome journals nothing: the interrupting message's turn runs
    // first, then the queued one's.
    let mut want = vec![
        message("slow question", None),
        model_call_started("m1"),
        message("queued", None),
        message("stop, do this instead", Some("interrupt")),
        event(
            "turn_cancelled",
            json!({"reason": "interrupted by a new message"}),
        ),
        model_call_started("m2"),
    ];
    want.extend(answered("m2", "Done."));
    want.push(model_call_started("m3"));
    want.extend(answered("m3", "Queued one done."));
    assert_eq!(stable(events), want);
    let done = TranscriptEntry::Assistant {
        text: "Done.".into(),
        tool_calls: vec![],
    };
    assert_eq!(
        model.transcripts(),
        [
            vec![user("slow question")],
            vec![user("slow question"), user("stop, do this instead")],
            vec![
                user("slow question"),
                user("stop, do this instead"),
                done,
                user("queued")
            ],
        ]
    );
    let state = registry.state(id).await.unwrap();
    assert!(state.turn.is_none() && state.queued.is_empty());
    check(&store, &registry, id).await;
    registry.stop_all();
}

async fn a_steering_message_joins_the_turn_before_its_next_model_call(backend: Backend) {
    let db = db::open(backend).await;
    let store = db.store.clone();
    let model = GatedModel::new(vec![
        ("", vec![("clock", json!({}))]),
        ("Noon in Paris.", vec![]),
    ]);
    let registry = SessionRegistry::new(store.clone(), model.clone(), vec![agent(NOWHERE)]);
    let id = new_session(&store).await;
    say(&registry, id, "what time is it").await;
    assert!(
        eventually(|| model.calls() == 1).await,
        "the model call runs"
    );
    say_with(&registry, id, "in Paris, please", MessageMode::Steer).await;
    // Not queued: it waits in the running turn for the turn's next model call.
    let state = registry.state(id).await.unwrap();
    assert!(state.queued.is_empty());
    assert_eq!(
        state.turn.map(|turn| turn.steering),
        Some(vec!["in Paris, please".to_string()])
    );
    model.open(2);
    let events = after_turns(&store, id, 1).await;
    let clock_call = json!({"call_id": "t1", "tool": "clock", "arguments": {}});
    let mut want = vec![
        message("what time is it", None),
        model_call_started("m1"),
        message("in Paris, please", Some("steer")),
        event(
            "model_call_finished",
            json!({"call_id": "m1", "text": "", "tool_calls": [clock_call.clone()]}),
        ),
        event("tool_call_requested", clock_call),
        event(
            "tool_call_started",
            json!({"call_id": "t1", "tool": "clock"}),
        ),
        event(
            "tool_call_finished",
            json!({"call_id": "t1", "tool": "clock"}),
        ),
        model_call_started("m2"),
    ];
    want.extend(answered("m2", "Noon in Paris."));
    assert_eq!(stable(events), want);
    // The first call saw the question alone; the second, the model's tool call, the tool's
    // result and then the steering text.
    let sent = model.transcripts();
    assert_eq!((sent.len(), sent[1].len()), (2, 4));
    assert_eq!(sent[0], [user("what time is it")]);
    let called = TranscriptEntry::Assistant {
        text: String::new(),
        tool_calls: vec![RequestedCall {
            call_id: "t1".into(),
            tool: "clock".into(),
            arguments: json!({}),
        }],
    };
    assert_eq!(sent[1][..2], [user("what time is it"), called]);
    assert!(matches!(&sent[1][2], TranscriptEntry::Tool { call_id, .. } if call_id == "t1"));
    assert_eq!(sent[1][3], user("in Paris, please"));
    let state = registry.state(id).await.unwrap();
    assert!(state.turn.is_none() && state.queued.is_empty());
    check(&store, &registry, id).await;
    registry.stop_all();
}

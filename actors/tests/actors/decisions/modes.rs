//! Messages that arrive mid-turn: `queue`, `interrupt`, `steer` and `drop_if_busy`,
//! per message or as the agent's default, by value on the journal, and the decision check over
//! such a journal.

use serde_json::json;
use stead_actors::{Action, Input, MessageMode, Refusal, SessionEvent, TranscriptEntry};

use super::*;

fn say(text: &str, mode: Option<MessageMode>) -> Input {
    Input::UserMessage {
        text: text.into(),
        client_id: None,
        mode,
        attachments: Vec::new(),
    }
}

/// The decision check over the session's journal as recorded.
pub(super) fn check(s: &Session) {
    let id = uuid::Uuid::now_v7();
    let events: Vec<stead_persistence::Event> = s
        .journal
        .iter()
        .enumerate()
        .map(|(i, event)| {
            let (kind, mut payload) = event.to_parts();
            // The session decided as `s1`; its tool keys name it.
            if let Some(key) = payload["idempotency_key"].as_str() {
                payload["idempotency_key"] = json!(key.replacen("s1:", &format!("{id}:"), 1));
            }
            stead_persistence::Event {
                session_id: id,
                seq: i as i64 + 1,
                kind,
                payload,
                created_at: chrono::Utc::now(),
            }
        })
        .collect();
    let report = stead_actors::replay::check(id, &json!({}), &events, &s.agent).unwrap();
    assert_eq!(report.divergence, None);
    assert!(report.decisions > 0);
}

fn user_texts(s: &Session) -> Vec<String> {
    s.state
        .transcript
        .iter()
        .filter_map(|e| match e {
            TranscriptEntry::User { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_queued_message_waits_and_a_busy_one_is_refused() {
    let mut s = Session::new();
    s.send(say("first", None)).unwrap();
    let from = s.journal.len();
    s.send(say("second", None)).unwrap();
    assert_eq!(s.kinds_since(from), ["user_message"]);
    assert!(matches!(
        &s.journal[from],
        SessionEvent::UserMessage { mode: None, .. }
    ));
    let before = s.journal.len();
    assert_eq!(
        s.send(say("third", Some(MessageMode::DropIfBusy))),
        Err(Refusal::Busy)
    );
    assert_eq!(s.journal.len(), before, "nothing journaled");
    s.send(answer("m1", "One.", vec![])).unwrap();
    assert_eq!(
        user_texts(&s),
        ["first", "second"],
        "the queued one runs next"
    );
    // Idle: drop_if_busy is an ordinary message.
    s.send(answer("m2", "Two.", vec![])).unwrap();
    s.send(say("fourth", Some(MessageMode::DropIfBusy)))
        .unwrap();
    assert_eq!(user_texts(&s), ["first", "second", "fourth"]);
}

#[test]
fn an_interrupt_cancels_the_turn_and_runs_ahead_of_the_queue() {
    let mut s = Session::new();
    s.send(say("slow question", None)).unwrap();
    s.send(say("queued", None)).unwrap();
    let from = s.journal.len();
    let actions = s
        .send(say("stop, do this instead", Some(MessageMode::Interrupt)))
        .unwrap();
    assert_eq!(
        s.kinds_since(from),
        ["user_message", "turn_cancelled", "model_call_started"]
    );
    assert_eq!(
        actions,
        [
            Action::AbortModelCall {
                call_id: "m1".into()
            },
            Action::CallModel {
                call_id: "m2".into()
            }
        ]
    );
    assert_eq!(
        user_texts(&s),
        ["slow question", "stop, do this instead"],
        "the interrupt runs first"
    );
    assert_eq!(s.state.queued, ["queued"]);
    // A late answer of the aborted call is refused.
    assert_eq!(s.send(answer("m1", "late", vec![])), Err(Refusal::Stale));
    s.send(answer("m2", "Done.", vec![])).unwrap();
    assert_eq!(
        user_texts(&s),
        ["slow question", "stop, do this instead", "queued"]
    );
    assert_eq!(s.replayed(), s.state);
    check(&s);
}

#[test]
fn an_interrupt_while_a_tool_runs_cancels_the_tool_first() {
    let mut s = Session::new();
    s.send(say("what time is it", None)).unwrap();
    s.send(answer("m1", "", vec![("clock", json!({}))]))
        .unwrap();
    let from = s.journal.len();
    let actions = s
        .send(say("never mind", Some(MessageMode::Interrupt)))
        .unwrap();
    assert_eq!(
        s.kinds_since(from),
        [
            "tool_call_cancelled",
            "user_message",
            "turn_cancelled",
            "model_call_started"
        ]
    );
    assert_eq!(
        actions[0],
        Action::AbortTool {
            call_id: "t1".into()
        }
    );
    check(&s);
}

#[test]
fn a_steering_message_joins_the_turn_before_its_next_model_call() {
    let mut s = Session::new();
    s.send(say("what time is it", None)).unwrap();
    s.send(answer("m1", "", vec![("clock", json!({}))]))
        .unwrap();
    let from = s.journal.len();
    s.send(say("in Paris, please", Some(MessageMode::Steer)))
        .unwrap();
    assert_eq!(s.kinds_since(from), ["user_message"]);
    assert!(s.state.queued.is_empty(), "not queued: it steers this turn");
    s.send(Input::ToolFinished {
        call_id: "t1".into(),
        result: json!({ "utc": "12:00" }),
    })
    .unwrap();
    // The transcript: the question, the tool call and its result, then the steering text.
    let roles: Vec<&str> = s
        .state
        .transcript
        .iter()
        .map(|e| match e {
            TranscriptEntry::User { .. } => "user",
            TranscriptEntry::Assistant { .. } => "assistant",
            TranscriptEntry::Tool { .. } => "tool",
        })
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user"]);
    assert_eq!(user_texts(&s), ["what time is it", "in Paris, please"]);
    assert_eq!(s.replayed(), s.state);
    check(&s);
}

#[test]
fn steering_that_no_model_call_takes_starts_the_next_turn() {
    let mut s = Session::new();
    s.send(say("hello", None)).unwrap();
    s.send(say("and be brief", Some(MessageMode::Steer)))
        .unwrap();
    let from = s.journal.len();
    // The call in flight answers without tools: the turn ends; the steering starts a turn.
    s.send(answer("m1", "Hi!", vec![])).unwrap();
    assert_eq!(
        s.kinds_since(from),
        [
            "model_call_finished",
            "assistant_message",
            "turn_finished",
            "model_call_started"
        ]
    );
    assert_eq!(user_texts(&s), ["hello", "and be brief"]);
    check(&s);
}

#[test]
fn the_agents_default_mode_applies_when_a_message_names_none() {
    let mut s = Session::new();
    s.agent.message_mode = MessageMode::Interrupt;
    s.send(say("one", None)).unwrap();
    let from = s.journal.len();
    s.send(say("two", None)).unwrap();
    assert_eq!(
        s.kinds_since(from),
        ["user_message", "turn_cancelled", "model_call_started"]
    );
    // An explicit mode wins over the default.
    let from = s.journal.len();
    s.send(say("three", Some(MessageMode::Queue))).unwrap();
    assert_eq!(s.kinds_since(from), ["user_message"]);
    // The check re-decides with what was recorded, whatever the default is now.
    s.agent.message_mode = MessageMode::Queue;
    check(&s);
}

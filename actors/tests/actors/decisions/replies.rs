//! Replies (docs/sessions.md, "Replies"): an answer without tool calls whose text a person
//! cannot read — empty, tool-call syntax, a call written as text, a result echoed as raw JSON —
//! is rejected, the turn makes one repair call, and when that fails too the reply is built
//! from the turn's tool results. Every step is journaled and replays to the same state.

use super::*;
use stead_actors::TranscriptEntry;

fn last_assistant(s: &Session) -> (String, bool) {
    s.journal
        .iter()
        .rev()
        .find_map(|e| match e {
            SessionEvent::AssistantMessage { text, fallback } => Some((text.clone(), *fallback)),
            _ => None,
        })
        .expect("an assistant_message")
}

/// The user asks the time; the clock answers `"12:00"`.
fn after_clock() -> Session {
    let mut s = Session::new();
    s.send(user("what time is it?")).unwrap();
    s.send(answer("m1", "", vec![("clock", json!({}))]))
        .unwrap();
    s.send(Input::ToolFinished {
        call_id: "t1".into(),
        result: json!({ "utc": "2026-12-05T12:00:00Z" }),
    })
    .unwrap();
    s
}

#[test]
fn a_call_written_as_text_is_rejected_and_a_repair_call_answers() {
    let mut s = after_clock();
    let from = s.journal.len();
    let actions = s
        .send(answer(
            "m2",
            ">{\"name\": \"clock\", \"arguments\": {}}",
            vec![],
        ))
        .unwrap();
    assert_eq!(
        actions,
        vec![Action::CallModel {
            call_id: "m3".into()
        }],
        "a repair call"
    );
    assert_eq!(
        s.kinds_since(from),
        [
            "model_call_finished",
            "reply_rejected",
            "model_call_started"
        ]
    );
    let turn = s.state.turn.clone().unwrap();
    assert_eq!(turn.rejected_replies, 1);
    // The rejected text is not in what the repair call sees.
    assert!(matches!(
        s.state.transcript.last(),
        Some(TranscriptEntry::Tool { .. })
    ));
    s.send(answer("m3", "It is noon (UTC).", vec![])).unwrap();
    assert_eq!(last_assistant(&s), ("It is noon (UTC).".into(), false));
    assert_eq!(s.state.status(), "idle");
    assert!(matches!(
        s.state.transcript.last(),
        Some(TranscriptEntry::Assistant { text, .. }) if text == "It is noon (UTC)."
    ));
    assert_eq!(s.replayed(), s.state, "replay rebuilds the same state");
}

#[test]
fn when_the_repair_fails_too_the_reply_is_built_from_the_results() {
    let mut s = after_clock();
    s.send(answer("m2", "", vec![])).unwrap();
    let from = s.journal.len();
    let actions = s
        .send(answer("m3", "{\"type\": \"clock\"}", vec![]))
        .unwrap();
    assert!(actions.is_empty());
    assert_eq!(
        s.kinds_since(from),
        [
            "model_call_finished",
            "reply_rejected",
            "assistant_message",
            "turn_finished"
        ]
    );
    let (text, fallback) = last_assistant(&s);
    assert!(fallback);
    assert_eq!(text, "The clock tool returned utc: 2026-12-05T12:00:00Z.");
    // The built reply is what later model calls see as the answer.
    assert!(matches!(
        s.state.transcript.last(),
        Some(TranscriptEntry::Assistant { text: t, tool_calls }) if *t == text && tool_calls.is_empty()
    ));
    assert_eq!(s.state.turn, None);
    assert_eq!(s.replayed(), s.state);
    // The next turn starts clean: its first call is not a repair call.
    s.send(user("thanks")).unwrap();
    assert_eq!(s.state.turn.as_ref().unwrap().rejected_replies, 0);
}

#[test]
fn a_rejected_tool_reports_the_rejection_when_the_model_cannot() {
    let mut s = Session::new();
    s.send(user("clean the users table")).unwrap();
    s.send(answer(
        "m1",
        "",
        vec![("delete_records", json!({"table": "users"}))],
    ))
    .unwrap();
    let mut no = decision("t1", false, ApprovalScope::Once);
    if let Input::Decision { reason, .. } = &mut no {
        *reason = Some("not today".into());
    }
    s.send(no).unwrap();
    s.send(answer("m2", "   ", vec![])).unwrap();
    s.send(answer("m3", "<tool_call>", vec![])).unwrap();
    let (text, fallback) = last_assistant(&s);
    assert!(fallback);
    assert_eq!(
        text,
        "The delete_records tool did not succeed: rejected by ada: not today."
    );
}

#[test]
fn an_empty_answer_to_a_plain_question_gets_an_honest_apology() {
    let mut s = Session::new();
    s.send(user("hello")).unwrap();
    s.send(answer("m1", "", vec![])).unwrap();
    s.send(answer("m2", "", vec![])).unwrap();
    let (text, fallback) = last_assistant(&s);
    assert!(fallback);
    assert!(text.starts_with("I could not produce an answer"), "{text}");
}

#[test]
fn raw_json_is_a_reply_only_when_no_tool_ran() {
    let mut s = Session::new();
    s.send(user("give me {\"a\": 1} back")).unwrap();
    s.send(answer("m1", "{\"a\": 1}", vec![])).unwrap();
    assert_eq!(last_assistant(&s), ("{\"a\": 1}".into(), false));

    let mut s = after_clock();
    s.send(answer("m2", "{\"utc\": \"2026-12-05T12:00:00Z\"}", vec![]))
        .unwrap();
    assert!(matches!(
        s.journal.last(),
        Some(SessionEvent::ModelCallStarted { call_id, .. }) if call_id == "m3"
    ));
}

#[test]
fn the_step_limit_ends_a_turn_with_a_built_reply_instead_of_a_repair() {
    let mut s = Session::new();
    s.send(user("what time is it?")).unwrap();
    // max_steps = 4: three clock calls, then a fourth answer that is unusable.
    for (m, t) in [("m1", "t1"), ("m2", "t2"), ("m3", "t3")] {
        s.send(answer(m, "", vec![("clock", json!({ "n": m }))]))
            .unwrap();
        s.send(Input::ToolFinished {
            call_id: t.into(),
            result: json!("12:00"),
        })
        .unwrap();
    }
    let actions = s.send(answer("m4", "", vec![])).unwrap();
    assert!(actions.is_empty(), "no fifth model call");
    let (text, fallback) = last_assistant(&s);
    assert!(fallback);
    assert_eq!(
        text,
        "The clock tool returned 12:00. The clock tool returned 12:00. The clock tool returned 12:00."
    );
    assert_eq!(s.state.status(), "idle");
}

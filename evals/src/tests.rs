use chrono::Utc;
use serde_json::{json, Value};
use stead_actors::SessionEvent;
use stead_persistence::Event;
use uuid::Uuid;

use crate::case::{Case, CaseError};
use crate::expect::{Expectation, Matcher};
use crate::grade::{grade, Grading};
use crate::outcome::TurnOutcome;

fn journal(events: Vec<SessionEvent>) -> Vec<Event> {
    let id = Uuid::now_v7();
    events
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let (kind, payload) = e.to_parts();
            Event {
                session_id: id,
                seq: i as i64 + 1,
                kind,
                payload,
                created_at: Utc::now() + chrono::Duration::milliseconds(i as i64 * 10),
            }
        })
        .collect()
}

fn user(text: &str) -> SessionEvent {
    SessionEvent::UserMessage {
        text: text.into(),
        client_id: None,
        mode: None,
        schedule: None,
        attachments: Vec::new(),
    }
}

fn turn(
    question: &str,
    tool: &str,
    arguments: Value,
    result: Value,
    reply: &str,
) -> Vec<SessionEvent> {
    vec![
        user(question),
        SessionEvent::ModelCallStarted {
            call_id: "m1".into(),
            route: "default".into(),
            model: "default".into(),
        },
        SessionEvent::ModelCallFinished {
            call_id: "m1".into(),
            text: String::new(),
            tool_calls: vec![],
            usage: stead_actors::Usage {
                prompt_tokens: 10,
                completion_tokens: 5,
            },
            provider: "p".into(),
            model: "m".into(),
            latency_ms: 1.0,
            ttft_ms: 1.0,
            cost: 0.002,
            guardrails: Vec::new(),
        },
        SessionEvent::ToolCallRequested {
            call_id: "t1".into(),
            tool: tool.into(),
            arguments,
        },
        SessionEvent::ToolCallFinished {
            call_id: "t1".into(),
            tool: tool.into(),
            result,
        },
        SessionEvent::AssistantMessage {
            text: reply.into(),
            fallback: false,
        },
        SessionEvent::TurnFinished {
            reason: stead_actors::TurnEnd::Completed,
        },
    ]
}

#[test]
fn a_case_holds_the_history_before_its_message_and_the_recorded_turn() {
    let mut events = turn(
        "first",
        "clock",
        json!({}),
        json!({"now": "noon"}),
        "It is noon.",
    );
    events.extend(turn(
        "What is 17 * 23?",
        "calculator",
        json!({"expression": "17 * 23"}),
        json!({"value": 391}),
        "391.",
    ));
    let events = journal(events);
    let id = events[0].session_id;
    let case = Case::from_journal("demo", id, &events, Some(8), vec![]).unwrap();
    assert_eq!(case.history.len(), 7);
    assert_eq!(case.turns[0].user, "What is 17 * 23?");
    let recorded = case.turns[0].recorded.as_ref().unwrap();
    assert_eq!(recorded.calls.len(), 1);
    assert_eq!(recorded.calls[0].tool, "calculator");
    assert_eq!(recorded.calls[0].result, Some(json!({"value": 391})));
    assert_eq!(recorded.reply, "391.");
    assert_eq!((recorded.model_calls, recorded.tokens()), (1, 15));
    assert_eq!(recorded.end, "completed");
    // Without a seq: the first message.
    let first = Case::from_journal("demo", id, &events, None, vec![]).unwrap();
    assert!(first.history.is_empty());
    assert_eq!(
        Case::from_journal("demo", id, &events, Some(2), vec![]),
        Err(CaseError::NotAUserMessage(2))
    );
    // A message that arrived mid-turn is not a starting point.
    let mut busy = turn("a", "clock", json!({}), json!({}), "x");
    busy.insert(3, user("b"));
    let busy = journal(busy);
    assert_eq!(
        Case::from_journal("demo", id, &busy, Some(4), vec![]),
        Err(CaseError::Busy(4))
    );
    // JSONL there and back.
    let text = crate::jsonl::write("suite", 3, std::slice::from_ref(&case));
    let (header, cases) = crate::jsonl::read(&text).unwrap();
    assert_eq!((header.name.as_str(), header.version), ("suite", 3));
    assert_eq!(cases, vec![case]);
    let bad = crate::jsonl::read("{\"stead_dataset\": 1, \"name\": \"x\", \"version\": 1}\n{}\n");
    assert_eq!(bad.unwrap_err().line, 2);
}

fn outcome(tool: &str, arguments: Value, reply: &str) -> TurnOutcome {
    let events = journal(turn("q", tool, arguments, json!({}), reply));
    crate::outcome::read_turn(&events, 1)
}

#[tokio::test]
async fn expectations_grade_each_on_its_own() {
    let actual = outcome(
        "calculator",
        json!({"expression": "17 * 23"}),
        "{\"answer\": 391}",
    );
    let case_turn = |expect: Vec<Expectation>| crate::case::CaseTurn {
        user: "q".into(),
        expect,
        recorded: None,
    };
    let tools = vec!["calculator".to_string()];
    let how = Grading {
        tools: &tools,
        ..Default::default()
    };
    let verdicts = grade(
        &case_turn(vec![
            Expectation::ToolCalled {
                tool: "calculator".into(),
                args: [(
                    "expression".to_string(),
                    Matcher::Regex(r"17\s*\*\s*23".into()),
                )]
                .into(),
            },
            Expectation::ReplyJson {
                schema: json!({"type": "object", "required": ["answer"]}),
            },
            Expectation::MaxSteps { steps: 1 },
            Expectation::NoTool,
            Expectation::ReplyContains { text: "392".into() },
            Expectation::ToolCalled {
                tool: "calculator".into(),
                args: [("expression".to_string(), Matcher::Equals(json!("1+1")))].into(),
            },
        ]),
        &actual,
        how,
    )
    .await;
    let passed: Vec<bool> = verdicts.iter().map(|v| v.passed).collect();
    assert_eq!(
        passed,
        [true, true, true, false, false, false],
        "{verdicts:#?}"
    );
    assert!(verdicts[5]
        .detail
        .contains("`calculator.expression` is \"17 * 23\""));
}

#[tokio::test]
async fn without_expectations_the_recording_is_the_baseline() {
    let recorded = outcome("lookup", json!({"table": "users"}), "Found 3.");
    let same = outcome("lookup", json!({"table": "users"}), "Found 3.");
    let other = outcome("lookup", json!({"table": "orders"}), "Found 3.");
    let case_turn = crate::case::CaseTurn {
        user: "q".into(),
        expect: vec![],
        recorded: Some(recorded),
    };
    let how = Grading::default();
    assert!(grade(&case_turn, &same, how).await.iter().all(|v| v.passed));
    let verdicts = grade(&case_turn, &other, how).await;
    assert!(!verdicts[0].passed);
    assert_eq!(
        verdicts[0].detail,
        "call 1 `lookup`: `table` \"users\" → \"orders\""
    );
    assert!(verdicts[1].passed, "the reply is the same");
}

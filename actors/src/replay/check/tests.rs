//! Tests of the decision check over journals recorded as the session actor would write them.

use std::collections::BTreeMap;

use chrono::Utc;

use super::*;
use crate::decide::ToolRules;
use crate::events::{ApprovalScope, Overrides, Usage};
use crate::policy::ApprovalPolicy;
use crate::state::CallStatus;
use crate::CallId;

fn rules(gated: ApprovalPolicy) -> AgentRules {
    let mut tools = BTreeMap::new();
    tools.insert(
        "drop".to_string(),
        ToolRules {
            approval: gated,
            idempotent: false,
            arguments: Default::default(),
            approver: Default::default(),
            builtin: None,
        },
    );
    tools.insert(
        "look".to_string(),
        ToolRules {
            approval: ApprovalPolicy::Never,
            idempotent: true,
            arguments: Default::default(),
            approver: Default::default(),
            builtin: None,
        },
    );
    AgentRules {
        route: "default".into(),
        max_steps: 3,
        tools,
        approval_timeout: None,
        dynamic: Vec::new(),
        message_mode: Default::default(),
        schedules: Default::default(),
        callbacks: Default::default(),
        delegation: Default::default(),
        context: Default::default(),
    }
}

/// Records a journal as the session actor would: each input decided, its events applied.
struct Recorder {
    id: Uuid,
    rules: AgentRules,
    state: SessionState,
    events: Vec<Event>,
    /// Inputs that journaled something.
    inputs: usize,
}

impl Recorder {
    fn new(rules: AgentRules) -> Self {
        let mut recorder = Recorder {
            id: Uuid::now_v7(),
            rules,
            state: SessionState::default(),
            events: Vec::new(),
            inputs: 0,
        };
        recorder.push(SessionEvent::SessionCreated {
            agent: "a".into(),
            principal: None,
            parent: None,
        });
        recorder
    }

    fn push(&mut self, event: SessionEvent) {
        let seq = self.state.last_seq + 1;
        self.state.apply(seq, &event);
        let (kind, payload) = event.to_parts();
        self.events.push(Event {
            session_id: self.id,
            seq,
            kind,
            payload,
            created_at: Utc::now(),
        });
    }

    fn input(&mut self, input: Input) {
        let decision =
            decide(&self.state, &self.id.to_string(), input, &self.rules).expect("a valid input");
        self.inputs += usize::from(!decision.events.is_empty());
        for event in decision.events {
            self.push(event);
        }
    }

    fn model(&self) -> CallId {
        self.state
            .turn
            .as_ref()
            .unwrap()
            .model_call
            .clone()
            .unwrap()
    }

    fn call(&self, pick: fn(&CallStatus) -> bool) -> CallId {
        let turn = self.state.turn.as_ref().unwrap();
        turn.calls
            .iter()
            .find(|c| pick(&c.status))
            .unwrap()
            .call_id
            .clone()
    }

    fn answer(&mut self, text: &str, tools: Vec<(&str, Value)>) {
        let call_id = self.model();
        self.input(Input::ModelFinished {
            call_id,
            output: ModelOutput {
                text: text.into(),
                tool_calls: tools.into_iter().map(|(t, a)| (t.to_string(), a)).collect(),
                usage: Usage {
                    prompt_tokens: 10,
                    completion_tokens: 2,
                },
                provider: "p".into(),
                model: "m".into(),
                latency_ms: 12.5,
                ttft_ms: 3.0,
                cost: 0.001,
                guardrails: Vec::new(),
            },
        });
    }

    fn say(&mut self, text: &str) {
        self.input(Input::UserMessage {
            text: text.into(),
            client_id: None,
            mode: None,
            attachments: Vec::new(),
        });
    }
}

/// Every path of the loop: rejection, expiry, cancel, a failed model call, a restart with a
/// non-idempotent tool in flight (in doubt), a queued message, max_steps, closing.
fn eventful(rules: AgentRules) -> Recorder {
    let mut r = Recorder::new(rules);
    r.say("drop t1");
    r.answer("", vec![("drop", json!({ "table": "t1" }))]);
    let parked = r.call(|s| matches!(s, CallStatus::AwaitingApproval { .. }));
    r.input(Input::Decision {
        call_id: parked,
        approved: false,
        reason: Some("no".into()),
        decided_by: "ada".into(),
        scope: ApprovalScope::Once,
        args_hash: None,
        overspend_usd: None,
        may_spend: true,
    });
    r.answer("ok, kept it", vec![]);
    r.say("drop t2");
    r.answer("", vec![("drop", json!({ "table": "t2" }))]);
    let parked = r.call(|s| matches!(s, CallStatus::AwaitingApproval { .. }));
    r.input(Input::ApprovalExpired { call_id: parked });
    r.say("queued while running");
    r.answer("gave up", vec![]);
    r.answer("and the queued one", vec![]);
    r.say("look and cancel");
    r.answer("", vec![("look", json!({}))]);
    r.input(Input::Cancel {
        reason: "user".into(),
    });
    r.say("fail please");
    let call_id = r.model();
    r.input(Input::ModelFailed {
        call_id,
        error: "503".into(),
    });
    r.say("drop t3");
    r.answer("", vec![("drop", json!({ "table": "t3" }))]);
    let parked = r.call(|s| matches!(s, CallStatus::AwaitingApproval { .. }));
    r.input(Input::Decision {
        call_id: parked,
        approved: true,
        reason: None,
        decided_by: "ada".into(),
        scope: ApprovalScope::Session,
        args_hash: None,
        overspend_usd: None,
        may_spend: true,
    });
    r.input(Input::Recover); // the process restarted while `drop` ran: in doubt
    r.say("loop");
    for _ in 0..3 {
        r.answer("", vec![("look", json!({}))]);
        let started = r.call(|s| matches!(s, CallStatus::Started { .. }));
        r.input(Input::ToolFinished {
            call_id: started,
            result: json!({ "seen": true }),
        });
    }
    r.input(Input::Close {
        reason: "done".into(),
    });
    r
}

#[test]
fn an_unchanged_loop_passes_every_path() {
    let r = eventful(rules(ApprovalPolicy::Always));
    let kinds: Vec<&str> = r.events.iter().map(|e| e.kind.as_str()).collect();
    for kind in [
        "turn_cancelled",
        "model_call_failed",
        "session_closed",
        "approval_decided",
    ] {
        assert!(kinds.contains(&kind), "{kind} recorded");
    }
    assert!(r
        .events
        .iter()
        .any(|e| e.payload["in_doubt"] == true && e.kind == "tool_call_failed"));
    assert!(r
        .events
        .iter()
        .any(|e| e.kind == "turn_finished" && e.payload["reason"] == "max_steps"));
    let report = check(r.id, &json!({}), &r.events, &r.rules).unwrap();
    assert_eq!(report.divergence, None);
    assert_eq!(report.decisions, r.inputs, "every input was re-decided");
}

#[test]
fn a_changed_rule_diverges_at_the_first_step_it_changes() {
    let r = eventful(rules(ApprovalPolicy::Always));
    let first_park = r
        .events
        .iter()
        .find(|e| e.kind == "approval_requested")
        .unwrap()
        .seq;
    let report = check(r.id, &json!({}), &r.events, &rules(ApprovalPolicy::Never)).unwrap();
    let divergence = report.divergence.unwrap();
    assert_eq!(divergence.seq, first_park);
    assert_eq!(divergence.recorded.unwrap()["kind"], "approval_requested");
    assert_eq!(divergence.decided.unwrap()["kind"], "tool_call_started");

    // Fewer steps allowed: the max_steps turn ends one model call earlier.
    let mut fewer = rules(ApprovalPolicy::Always);
    fewer.max_steps = 2;
    let divergence = check(r.id, &json!({}), &r.events, &fewer)
        .unwrap()
        .divergence
        .unwrap();
    assert_eq!(
        divergence.decided.unwrap()["payload"]["reason"],
        "max_steps"
    );
}

#[test]
fn another_session_id_changes_idempotency_keys_unless_provenance_says_so() {
    let r = eventful(rules(ApprovalPolicy::Always));
    let other = Uuid::now_v7();
    let divergence = check(other, &json!({}), &r.events, &r.rules)
        .unwrap()
        .divergence;
    assert_eq!(
        divergence.unwrap().recorded.unwrap()["kind"],
        "tool_call_started"
    );
    let imported =
        json!({ IMPORTED_FROM: [{ "session_id": r.id, "through_seq": r.events.len() }] });
    assert_eq!(
        check(other, &imported, &r.events, &r.rules)
            .unwrap()
            .divergence,
        None
    );
}

/// Two turns that each run the (approval-free) `look` tool.
fn looks(r: &mut Recorder, turns: usize) {
    for _ in 0..turns {
        r.say("look");
        r.answer("", vec![("look", json!({}))]);
        let started = r.call(|s| matches!(s, CallStatus::Started { .. }));
        r.input(Input::ToolFinished {
            call_id: started,
            result: json!({ "seen": true }),
        });
        r.answer("seen", vec![]);
    }
}

#[test]
fn a_fork_of_an_import_attributes_each_part_to_its_decider() {
    // A records two turns; B imports all of it; C forks B after the first turn and
    // runs a turn of its own.
    let mut a = Recorder::new(rules(ApprovalPolicy::Always));
    looks(&mut a, 2);
    let b = Uuid::now_v7();
    let at = a
        .events
        .iter()
        .find(|e| e.kind == "turn_finished")
        .unwrap()
        .seq;
    let mut c = Recorder::new(a.rules.clone());
    c.id = Uuid::now_v7();
    c.events.clear();
    c.state = SessionState::default();
    for event in &a.events[..at as usize] {
        let typed = SessionEvent::from_parts(&event.kind, &event.payload).unwrap();
        c.push(typed);
    }
    c.push(SessionEvent::SessionForked {
        from: b.to_string(),
        at,
        overrides: Overrides::default(),
        principal: None,
    });
    looks(&mut c, 1);
    let clipped = json!({ IMPORTED_FROM: [{ "session_id": a.id, "through_seq": at }] });
    let report = check(c.id, &clipped, &c.events, &c.rules).unwrap();
    assert_eq!(report.divergence, None);
    // Unclipped, the import would claim C's own steps for A.
    let unclipped =
        json!({ IMPORTED_FROM: [{ "session_id": a.id, "through_seq": a.events.len() }] });
    let report = check(c.id, &unclipped, &c.events, &c.rules).unwrap();
    assert!(report.divergence.is_some());
}

#[test]
fn a_step_taken_without_input_outside_a_fork_is_a_divergence() {
    let mut r = Recorder::new(rules(ApprovalPolicy::Always));
    looks(&mut r, 1);
    // A recorded step at a decision boundary that no input explains (here moved ahead of
    // the tool result that caused it): the current code would wait for input there.
    let finished = r
        .events
        .iter()
        .position(|e| e.kind == "tool_call_finished")
        .unwrap();
    let mut cut = r.events.clone();
    let started = cut.remove(finished + 1);
    cut.insert(finished, started);
    for (i, event) in cut.iter_mut().enumerate() {
        event.seq = i as i64 + 1;
    }
    let report = check(r.id, &json!({}), &cut, &r.rules).unwrap();
    assert!(report.divergence.is_some(), "{report:?}");
    let unreadable = {
        let mut events = r.events.clone();
        events[2].kind = "from_the_future".into();
        check(r.id, &json!({}), &events, &r.rules).unwrap_err()
    };
    assert_eq!(unreadable.seq, 3);
}

/// One guardrail's verdict, as the tool task would report it.
fn verdict(
    guardrail: &str,
    effect: stead_guardrails::results::Effect,
) -> stead_guardrails::results::GuardrailCheck {
    use stead_guardrails::results::{CheckOutcome, Effect, Finding, GuardrailCheck};
    let found = effect != Effect::Pass;
    GuardrailCheck {
        guardrail: guardrail.into(),
        outcome: if found {
            CheckOutcome::Found
        } else {
            CheckOutcome::Clean
        },
        effect,
        findings: found
            .then(|| Finding {
                path: "/body".into(),
                start: 0,
                end: 28,
                entity: "INJECTION".into(),
                excerpt: Some("ignore previous instructions".into()),
                placeholder: None,
            })
            .into_iter()
            .collect(),
        reason: None,
        elapsed_ms: 0.2,
    }
}

/// A session whose tool results went through guardrails: one passed as redacted, one held and
/// approved, one held and rejected, one held until it expired, one blocked.
fn guarded() -> Recorder {
    use stead_guardrails::results::Effect;
    let mut r = Recorder::new(rules(ApprovalPolicy::Never));
    let held = |r: &Recorder| r.call(|s| matches!(s, CallStatus::Held { .. }));
    let outcomes = [
        (Effect::Redact, None),
        (Effect::Approve, Some(true)),
        (Effect::Approve, Some(false)),
        (Effect::Approve, None),
        (Effect::Block, None),
    ];
    for (i, (effect, decision)) in outcomes.into_iter().enumerate() {
        r.say(&format!("look {i}"));
        r.answer("", vec![("look", json!({ "page": i }))]);
        let started = r.call(|s| matches!(s, CallStatus::Started { .. }));
        r.input(Input::ToolChecked {
            call_id: started,
            result: json!({ "body": format!("page {i}: [EMAIL_{i}]") }),
            checks: vec![verdict("pii", Effect::Pass), verdict("injection", effect)],
        });
        if effect == Effect::Approve {
            let call_id = held(&r);
            match decision {
                Some(approved) => r.input(Input::Decision {
                    call_id,
                    approved,
                    reason: (!approved).then(|| "it tries to steer the agent".into()),
                    decided_by: "ada".into(),
                    scope: ApprovalScope::Once,
                    args_hash: None,
                    overspend_usd: None,
                    may_spend: true,
                }),
                None => r.input(Input::ApprovalExpired { call_id }),
            }
        }
        r.answer(&format!("done {i}"), vec![]);
    }
    r
}

#[test]
fn guardrail_verdicts_are_replayed_from_the_journal_not_checked_again() {
    let r = guarded();
    let kinds: Vec<&str> = r.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "guardrail_checked").count(),
        5
    );
    let held: Vec<&Event> = r
        .events
        .iter()
        .filter(|e| e.kind == "guardrail_checked" && !e.payload["held"].is_null())
        .collect();
    assert_eq!(held.len(), 3);
    let failures: Vec<&str> = r
        .events
        .iter()
        .filter(|e| e.kind == "tool_call_failed")
        .filter_map(|e| e.payload["error"].as_str())
        .collect();
    assert_eq!(
        failures,
        [
            "the result was withheld: ada rejected it: it tries to steer the agent",
            "the result was withheld: the approval expired before anyone decided",
            "the result was blocked: guardrail `injection` found INJECTION",
        ]
    );
    // No checker exists here: the recorded verdicts are the inputs.
    let report = check(r.id, &json!({}), &r.events, &r.rules).unwrap();
    assert_eq!(report.divergence, None);
    assert_eq!(report.decisions, r.inputs, "every input was re-decided");

    // A journal whose approved result is not the one that was held diverges there.
    let mut tampered = r.events.clone();
    let approved = tampered
        .iter()
        .position(|e| e.kind == "approval_decided" && e.payload["approved"] == true)
        .unwrap();
    let finished = &mut tampered[approved + 1];
    assert_eq!(finished.kind, "tool_call_finished");
    finished.payload["result"] = json!({ "body": "something else" });
    let divergence = check(r.id, &json!({}), &tampered, &r.rules)
        .unwrap()
        .divergence
        .unwrap();
    assert_eq!(divergence.seq, tampered[approved + 1].seq);
    assert_eq!(
        divergence.decided.unwrap()["payload"]["result"],
        json!({ "body": "page 1: [EMAIL_1]" })
    );
}

//! Context management's decisions (docs/sessions.md, "Context management"): a compaction is
//! accepted only for the model call in flight and is journaled before that call is issued
//! again; the fold drops the replaced entries and keeps the summary.

use super::*;
use stead_actors::TranscriptEntry;

fn compact(call_id: &str, entries: u64, summary: Option<&str>) -> Input {
    Input::Compact(stead_actors::events::Compaction {
        call_id: call_id.into(),
        entries,
        turns: 1,
        summary: summary.map(str::to_string),
        model: summary.map(|_| "double".to_string()),
        tokens_before: 900,
        tokens_after: 300,
    })
}

#[test]
fn a_compaction_is_journaled_before_the_call_it_is_for_is_issued_again() {
    let mut s = Session::new();
    s.send(user("first question")).unwrap();
    s.send(answer("m1", "first answer", vec![])).unwrap();
    s.send(user("second question")).unwrap();
    assert_eq!(s.state.transcript.len(), 3);
    // Not for a call that is not in flight, and never of nothing.
    assert_eq!(s.send(compact("m1", 2, None)), Err(Refusal::Stale));
    assert_eq!(s.send(compact("m2", 0, None)), Err(Refusal::Stale));
    assert_eq!(s.send(compact("m2", 9, None)), Err(Refusal::Stale));

    let from = s.journal.len();
    let actions = s
        .send(compact("m2", 2, Some("They asked a first question.")))
        .unwrap();
    assert_eq!(
        actions,
        vec![Action::CallModel {
            call_id: "m2".into()
        }],
        "the same call goes out over the compacted transcript"
    );
    assert_eq!(s.kinds_since(from), ["context_compacted"]);
    assert_eq!(
        s.state.transcript.iter().cloned().collect::<Vec<_>>(),
        vec![TranscriptEntry::User {
            text: "second question".into(),
            attachments: Vec::new(),
        }]
    );
    assert_eq!(
        s.state.summary.as_deref(),
        Some("They asked a first question.")
    );
    assert_eq!(s.state.compactions, 1);
    assert_eq!(s.replayed(), s.state, "replay rebuilds the compacted state");

    // The call's answer lands as usual.
    s.send(answer("m2", "second answer", vec![])).unwrap();
    assert_eq!(s.state.status(), "idle");

    // A truncation keeps the summary it had.
    s.send(user("third question")).unwrap();
    s.send(compact("m3", 2, None)).unwrap();
    assert_eq!(
        s.state.summary.as_deref(),
        Some("They asked a first question.")
    );
    assert_eq!(s.state.transcript.len(), 1);
    assert_eq!(s.replayed(), s.state);
}

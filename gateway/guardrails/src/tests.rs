//! The checks on labelled examples, positives and look-alikes that must not be taken; what the
//! actions do to a call's texts.

use super::*;

fn pii(entities: Option<&[&str]>) -> Arc<Guardrail> {
    Arc::new(
        GuardrailConfig {
            entities: entities.map(|e| e.iter().map(|s| s.to_string()).collect()),
            ..GuardrailConfig::new("pii", GuardrailKind::Pii, GuardrailAction::Redact)
        }
        .build()
        .unwrap(),
    )
}

/// The entities found in `text`, with the text each covers.
fn found(text: &str) -> Vec<(String, String)> {
    pii(None)
        .check(text)
        .into_iter()
        .map(|s| (s.entity, text[s.start..s.end].to_string()))
        .collect()
}

fn one(entity: &str, value: &str) -> Vec<(String, String)> {
    vec![(entity.to_string(), value.to_string())]
}

#[test]
fn personal_data_is_found() {
    let cases = [
        (
            "write to jane.doe+work@example.co.uk today",
            "EMAIL",
            "jane.doe+work@example.co.uk",
        ),
        ("call +44 20 7946 0958 now", "PHONE", "+44 20 7946 0958"),
        ("or (415) 555-0132", "PHONE", "(415) 555-0132"),
        (
            "card 4111 1111 1111 1111 exp",
            "CARD",
            "4111 1111 1111 1111",
        ),
        ("card 5500-0000-0000-0004.", "CARD", "5500-0000-0000-0004"),
        (
            "IBAN GB82 WEST 1234 5698 7654 32 please",
            "IBAN",
            "GB82 WEST 1234 5698 7654 32",
        ),
        (
            "IBAN DE89370400440532013000",
            "IBAN",
            "DE89370400440532013000",
        ),
        ("ssn 123-45-6789", "SSN", "123-45-6789"),
        ("NI number JG 10 37 58 A", "NINO", "JG 10 37 58 A"),
        ("from 192.168.10.4:443", "IP", "192.168.10.4"),
        (
            "host 2001:db8::8a2e:370:7334 up",
            "IP",
            "2001:db8::8a2e:370:7334",
        ),
    ];
    for (text, entity, value) in cases {
        assert_eq!(found(text), one(entity, value), "{text}");
    }
}

#[test]
fn secrets_are_found() {
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
    let pem = "-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASCAT8wggE7\n-----END PRIVATE KEY-----";
    let cases = [
        "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "stk_8fJ2kQ0aZx91LmNoPqRsTuVwXyZaBcDeFgHiJkLmNoP",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
        "xoxb-1234567890-abcdefghij",
        jwt,
        pem,
        // No known shape, but random: base64 of 30 random bytes.
        "q8Xz3Lp0vR7tK2mN9wB4yC6dF1gH5jS0aE8uI3oP",
    ];
    for secret in cases {
        let text = format!("the key is {secret} ok");
        assert_eq!(found(&text), one("SECRET", secret), "{text}");
    }
}

#[test]
fn look_alikes_are_not_taken() {
    for text in [
        // Luhn fails.
        "order 4111 1111 1111 1112 shipped",
        // One digit repeated passes Luhn but is no card.
        "0000 0000 0000 0000",
        // A bad IBAN check.
        "GB82 WEST 1234 5698 7654 33",
        // Versions, dates, times, paths.
        "version 1.2.3 released 2026-12-06 at 12:30:45",
        "use std::net::IpAddr and Vec::new()",
        // A git hash and a UUID: not random enough for a secret.
        "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
        "id 01a24a57-276d-73bb-9e0e-a289b38812e9",
        // An SSN that is never issued.
        "000-12-3456 and 666-12-3456",
        // Too few digits for a phone.
        "room 12 34",
        "a_long_identifier_without_any_digits_in_it_at_all",
    ] {
        assert_eq!(found(text), Vec::new(), "{text}");
    }
}

#[test]
fn entities_narrow_a_pii_guardrail_and_unknown_ones_are_refused() {
    let only = pii(Some(&["EMAIL"]));
    let text = "a@b.io 4111111111111111";
    let spans = only.check(text);
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].entity, "EMAIL");
    let bad = GuardrailConfig {
        entities: Some(vec!["PASSPORT".into()]),
        ..GuardrailConfig::new("p", GuardrailKind::Pii, GuardrailAction::Flag)
    };
    let error = Guardrails::build(&[bad]).err().unwrap().to_string();
    assert!(error.contains("PASSPORT"), "{error}");
}

fn guardrail(name: &str, kind: GuardrailKind, action: GuardrailAction) -> GuardrailConfig {
    GuardrailConfig::new(name, kind, action)
}

#[test]
fn redaction_is_typed_and_consistent_across_a_calls_texts() {
    let set = Guardrails::build(&[guardrail(
        "pii",
        GuardrailKind::Pii,
        GuardrailAction::Redact,
    )])
    .unwrap();
    let mut texts = vec![
        "mail ann@example.com or bob@example.com".to_string(),
        "again: ann@example.com, card 4111111111111111".to_string(),
    ];
    let mut placeholders = Placeholders::default();
    let verdicts = apply(&[set.get("pii").unwrap()], &mut texts, &mut placeholders).unwrap();
    assert_eq!(
        texts,
        vec![
            "mail [EMAIL_1] or [EMAIL_2]".to_string(),
            "again: [EMAIL_1], card [CARD_1]".to_string(),
        ]
    );
    assert_eq!(
        verdicts,
        vec![Verdict {
            guardrail: "pii".into(),
            action: GuardrailAction::Redact,
            found: vec![("EMAIL".into(), 3), ("CARD".into(), 1)],
        }]
    );
    // The same texts again (the next turn's history) number the same way.
    let mut again = vec![
        "mail ann@example.com or bob@example.com".to_string(),
        "again: ann@example.com, card 4111111111111111".to_string(),
    ];
    apply(
        &[set.get("pii").unwrap()],
        &mut again,
        &mut Placeholders::default(),
    )
    .unwrap();
    assert_eq!(again, texts);
}

#[test]
fn block_stops_flag_passes_and_the_operators_lists_work() {
    let mut terms = guardrail("words", GuardrailKind::DenyTerms, GuardrailAction::Block);
    terms.terms = vec!["Project Falcon".into(), "acme-internal".into()];
    let mut codes = guardrail("codes", GuardrailKind::Regex, GuardrailAction::Flag);
    codes.patterns = vec![config::Pattern {
        label: "TICKET".into(),
        pattern: r"\bOPS-\d{3,}\b".into(),
    }];
    let set = Guardrails::build(&[terms, codes]).unwrap();
    let list = [set.get("codes").unwrap(), set.get("words").unwrap()];
    let mut texts = vec!["see OPS-1234 and ops-9".to_string()];
    let verdicts = apply(&list, &mut texts, &mut Placeholders::default()).unwrap();
    assert_eq!(texts[0], "see OPS-1234 and ops-9", "flag leaves the text");
    assert_eq!(verdicts[0].found, vec![("TICKET".to_string(), 1)]);
    let mut texts = vec!["about project falcon's launch".to_string()];
    let blocked = apply(&list, &mut texts, &mut Placeholders::default()).unwrap_err();
    assert_eq!(
        blocked,
        Blocked {
            guardrail: "words".into(),
            entities: vec!["TERM".into()],
        }
    );
    // Whole words only.
    let mut texts = vec!["falconry and acme-internals".to_string()];
    assert!(apply(&list, &mut texts, &mut Placeholders::default()).is_ok());
}

#[test]
fn bad_configurations_are_refused_by_name() {
    let mut bad = guardrail("r", GuardrailKind::Regex, GuardrailAction::Block);
    bad.patterns = vec![config::Pattern {
        label: "X".into(),
        pattern: "(".into(),
    }];
    assert!(Guardrails::build(&[bad])
        .err()
        .unwrap()
        .to_string()
        .contains("`r`"));
    let empty = guardrail("t", GuardrailKind::DenyTerms, GuardrailAction::Block);
    assert!(Guardrails::build(&[empty]).is_err());
    let twice = guardrail("p", GuardrailKind::Pii, GuardrailAction::Flag);
    assert!(matches!(
        Guardrails::build(&[twice.clone(), twice]),
        Err(GuardrailError::Duplicate(_))
    ));
}

/// Feeds `text` to a hold-back in pieces of `size` bytes (at char boundaries); the pieces it
/// released, and the joined text.
fn streamed(text: &str, size: usize, guardrails: Vec<Arc<Guardrail>>) -> (Vec<String>, String) {
    let mut holdback = Holdback::new(guardrails, Placeholders::default());
    let mut pieces = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let mut end = (at + size).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        if let Some(out) = holdback.push(&text[at..end]) {
            pieces.push(out);
        }
        at = end;
    }
    pieces.extend(holdback.finish());
    (pieces, holdback.released().to_string())
}

#[test]
fn a_streamed_secret_never_reaches_the_reader_whatever_the_pieces() {
    let pem = "-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASCAT8wggE7\nAgEAAkEAq7BFUpkGp3+LQmlQ\n-----END PRIVATE KEY-----";
    let text = format!(
        "Sure — the key is sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 and the café's phone \
         is +44 20 7946 0958; mail ann@example.com. The private key:\n{pem}\nDone."
    );
    let guardrails = vec![pii(None)];
    let mut whole = vec![text.clone()];
    apply(&guardrails, &mut whole, &mut Placeholders::default()).unwrap();
    assert!(
        whole[0].contains("[SECRET_1]") && whole[0].contains("[SECRET_2]"),
        "{}",
        whole[0]
    );
    for size in [1, 2, 3, 5, 7, 16, 64, 1000] {
        let (pieces, joined) = streamed(&text, size, guardrails.clone());
        assert_eq!(pieces.concat(), joined);
        assert_eq!(joined, whole[0], "pieces of {size}");
        for raw in ["sk-proj", "7946", "ann@", "MIIBVQ", "AgEAAkEA"] {
            assert!(
                !joined.contains(raw),
                "pieces of {size}: {raw} reached the reader"
            );
        }
    }
}

#[test]
fn a_stream_holds_back_little_and_a_block_stops_it() {
    // Plain text goes out as it comes, less the window and the word being written.
    let mut holdback = Holdback::new(vec![pii(None)], Placeholders::default());
    let text = "word ".repeat(40);
    let out = holdback.push(&text).unwrap();
    assert!(
        out.len() >= text.len() - WINDOW && text.starts_with(&out),
        "{out}"
    );
    // A block guardrail stops the text at its finding: nothing of it or after is released.
    let mut words = guardrail("words", GuardrailKind::DenyTerms, GuardrailAction::Block);
    words.terms = vec!["Project Falcon".into()];
    let set = Guardrails::build(&[words]).unwrap();
    let (pieces, joined) = streamed(
        &format!(
            "{} then Project Falcon details follow here and more",
            "ok ".repeat(30)
        ),
        4,
        vec![set.get("words").unwrap()],
    );
    assert!(!joined.contains("Falcon"), "{joined}");
    assert!(joined.starts_with("ok ok"), "{joined}");
    assert_eq!(pieces.concat(), joined);
}

#[test]
fn a_restorable_placeholder_turns_back_into_its_value_and_only_it() {
    let mut restoring = guardrail("pii", GuardrailKind::Pii, GuardrailAction::Redact);
    restoring.restore_for_tools = true;
    restoring.entities = Some(vec!["EMAIL".into()]);
    let mut keeping = guardrail("cards", GuardrailKind::Pii, GuardrailAction::Redact);
    keeping.entities = Some(vec!["CARD".into()]);
    let set = Guardrails::build(&[restoring, keeping]).unwrap();
    let list = [set.get("pii").unwrap(), set.get("cards").unwrap()];
    let mut texts = vec!["mail ann@example.com, card 4111111111111111".to_string()];
    let mut placeholders = Placeholders::default();
    apply(&list, &mut texts, &mut placeholders).unwrap();
    assert_eq!(texts[0], "mail [EMAIL_1], card [CARD_1]");
    assert_eq!(
        placeholders.restore(r#"{"to": "[EMAIL_1]", "card": "[CARD_1]", "cc": "[EMAIL_2]"}"#),
        r#"{"to": "ann@example.com", "card": "[CARD_1]", "cc": "[EMAIL_2]"}"#
    );
    let mut flagging = guardrail("f", GuardrailKind::Pii, GuardrailAction::Flag);
    flagging.restore_for_tools = true;
    assert!(Guardrails::build(&[flagging]).is_err());
}

#[test]
fn a_streamed_text_gets_one_verdict_per_guardrail_whatever_its_pieces() {
    let text = format!(
        "write to ann@example.com{} then to bob@example.com, card 4111 1111 1111 1111.",
        " and more words".repeat(20)
    );
    let mut holdback = Holdback::new(vec![pii(None)], Placeholders::default());
    for piece in text.as_bytes().chunks(7) {
        holdback.push(std::str::from_utf8(piece).unwrap());
    }
    holdback.finish();
    assert_eq!(
        holdback.verdicts(),
        [Verdict {
            guardrail: "pii".into(),
            action: GuardrailAction::Redact,
            found: vec![("EMAIL".into(), 2), ("CARD".into(), 1)],
        }]
    );
}

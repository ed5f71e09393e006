//! `stead bench guardrails` (docs/benchmarks.md): what the `pii` check adds to a call — p50 and
//! p99 of checking a 2 KB message (one with personal data and a secret in it, one without),
//! of redacting it, and of a 2 KB answer streamed through the hold-back in 16-byte pieces —
//! against the target of 1 ms p99. No peer runs here yet (Microsoft Presidio's analyzer loads a
//! spaCy model by default, which the registries here do not carry); the ratio is to the target.

use std::time::Instant;

use serde_json::json;
use stead_guardrails::{
    apply, GuardrailAction, GuardrailConfig, GuardrailKind, Guardrails, Holdback, Placeholders,
};

use crate::cli::GuardrailsBenchArgs;

/// The target: the `pii` check adds at most this (p99) on a 2 KB message.
const TARGET_P99_US: f64 = 1000.0;

/// A message of about `bytes` bytes of prose; with `pii`, an address, a phone number, a card
/// number and a key spread through it.
fn message(bytes: usize, pii: bool) -> String {
    let prose = "The quarterly report is due on Friday and the team will review the figures \
                 before the meeting with the customer, who asked for the draft in advance. ";
    let items = [
        "Write to jane.doe@example.com about it. ",
        "Call +44 20 7946 0958 if it slips. ",
        "Charge card 4111 1111 1111 1111 for the travel. ",
        "The deploy key is sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 for now. ",
    ];
    let mut text = String::new();
    let mut i = 0;
    while text.len() < bytes {
        text.push_str(prose);
        if pii && i < items.len() {
            text.push_str(items[i]);
            i += 1;
        }
    }
    let mut cut = bytes.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text
}

fn quantiles(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    (at(0.50), at(0.99))
}

/// Times `f` `samples` times (after as many untimed runs), in microseconds.
fn timed(samples: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..samples.min(1000) {
        f();
    }
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        f();
        out.push(started.elapsed().as_secs_f64() * 1e6);
    }
    quantiles(out)
}

pub async fn guardrails(args: GuardrailsBenchArgs) -> anyhow::Result<()> {
    let set = Guardrails::build(&[GuardrailConfig::new(
        "pii",
        GuardrailKind::Pii,
        GuardrailAction::Redact,
    )])?;
    let pii = set.get("pii").expect("built above");
    let list = vec![pii.clone()];
    let with = message(args.bytes, true);
    let without = message(args.bytes, false);
    assert_eq!(pii.check(&with).len(), 4, "the message holds four findings");
    assert!(
        pii.check(&without).is_empty(),
        "the plain message holds none"
    );
    eprintln!(
        "guardrails: {} samples on {}-byte messages",
        args.samples, args.bytes
    );
    let check_with = timed(args.samples, || {
        std::hint::black_box(pii.check(std::hint::black_box(&with)));
    });
    let check_without = timed(args.samples, || {
        std::hint::black_box(pii.check(std::hint::black_box(&without)));
    });
    let redact = timed(args.samples, || {
        let mut texts = [with.clone()];
        apply(&list, &mut texts, &mut Placeholders::default()).expect("redact never blocks");
        std::hint::black_box(texts);
    });
    let streamed = timed(args.samples / 10, || {
        let mut holdback = Holdback::new(list.clone(), Placeholders::default());
        for piece in with.as_bytes().chunks(16) {
            // The message is ASCII: every 16-byte piece is text.
            holdback.push(std::str::from_utf8(piece).expect("ASCII"));
        }
        holdback.finish();
        std::hint::black_box(holdback.released().len());
    });
    let pair = |(p50, p99): (f64, f64)| json!({"p50_us": p50, "p99_us": p99});
    let figures = json!({
        "bytes": args.bytes,
        "samples": args.samples,
        "check_with_pii": pair(check_with),
        "check_without_pii": pair(check_without),
        "redact": pair(redact),
        "streamed_answer_16_byte_pieces": pair(streamed),
        "target_p99_us": TARGET_P99_US,
        "check_p99_over_target": check_with.1.max(check_without.1) / TARGET_P99_US,
        "peer": null,
    });
    if args.json {
        println!("{figures}");
    } else {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    }
    Ok(())
}

//! Personal data and secrets by pattern, each candidate checked where a check exists (a card
//! number's Luhn digit, an IBAN's mod-97, an IP address's parse, a phone number's digit count,
//! a token's entropy), so that order numbers and version strings are not taken for them.

use std::net::IpAddr;

use regex::Regex;

use crate::Span;

/// The entities `pii` knows.
pub const ENTITIES: [&str; 8] = [
    "EMAIL", "PHONE", "CARD", "IBAN", "SSN", "NINO", "IP", "SECRET",
];

struct Detector {
    entity: &'static str,
    pattern: Regex,
    /// Whether a match really is one (`None`: every match is).
    valid: Option<fn(&str) -> bool>,
}

pub(crate) struct Pii {
    detectors: Vec<Detector>,
}

#[allow(clippy::unwrap_used)] // The patterns are constants, compiled by the tests.
fn re(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap()
}

impl Pii {
    /// The detectors of `entities` (all when `None`); an unknown entity is an error.
    pub(crate) fn new(entities: Option<&[String]>) -> Result<Self, String> {
        if let Some(unknown) = entities
            .into_iter()
            .flatten()
            .find(|e| !ENTITIES.contains(&e.as_str()))
        {
            return Err(format!(
                "`{unknown}` is not an entity of `pii` ({})",
                ENTITIES.join(", ")
            ));
        }
        let wanted = |e: &str| entities.is_none_or(|list| list.iter().any(|w| w == e));
        let all = [
            // Secrets first: a key embedded in a URL or an address is a secret.
            Detector {
                entity: "SECRET",
                pattern: re(concat!(
                    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
                    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
                    r"|\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}",
                    r"|\bstk_[0-9A-Za-z]{43}\b",
                    r"|\bAKIA[0-9A-Z]{16}\b",
                    r"|\bgh[pousr]_[A-Za-z0-9]{36,}",
                    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}",
                    r"|\bAIza[0-9A-Za-z_-]{35}",
                    r"|\b[A-Za-z0-9+/_-]{32,}={0,2}",
                )),
                valid: Some(secret),
            },
            Detector {
                entity: "EMAIL",
                pattern: re(
                    r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
                ),
                valid: None,
            },
            Detector {
                entity: "IBAN",
                pattern: re(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b"),
                valid: Some(iban),
            },
            Detector {
                entity: "CARD",
                pattern: re(r"\b\d(?:[ -]?\d){12,18}\b"),
                valid: Some(card),
            },
            Detector {
                entity: "SSN",
                pattern: re(r"\b\d{3}-\d{2}-\d{4}\b"),
                valid: Some(ssn),
            },
            Detector {
                entity: "NINO",
                pattern: re(r"\b[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b"),
                valid: None,
            },
            Detector {
                entity: "IP",
                pattern: re(concat!(
                    r"\b(?:\d{1,3}\.){3}\d{1,3}\b",
                    r"|\b[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{0,4}){2,7}",
                )),
                valid: Some(ip),
            },
            Detector {
                entity: "PHONE",
                pattern: re(
                    r"(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]?\d{2,4}){2,4}",
                ),
                valid: Some(phone),
            },
        ];
        Ok(Pii {
            detectors: all.into_iter().filter(|d| wanted(d.entity)).collect(),
        })
    }

    /// Every finding (overlaps are resolved by the caller).
    pub(crate) fn find(&self, text: &str) -> Vec<Span> {
        let mut spans: Vec<Span> = Vec::new();
        for detector in &self.detectors {
            for m in detector.pattern.find_iter(text) {
                // An earlier detector (secrets first) owns what it matched.
                if spans.iter().any(|s| m.start() < s.end && s.start < m.end()) {
                    continue;
                }
                if detector.valid.is_none_or(|valid| valid(m.as_str())) {
                    spans.push(Span {
                        start: m.start(),
                        end: m.end(),
                        entity: detector.entity.to_string(),
                    });
                }
            }
        }
        spans
    }
}

fn digits(text: &str) -> Vec<u32> {
    text.chars().filter_map(|c| c.to_digit(10)).collect()
}

/// A card number: 13 to 19 digits whose Luhn check digit holds, not all one digit.
fn card(text: &str) -> bool {
    let d = digits(text);
    if !(13..=19).contains(&d.len()) || d.iter().all(|x| *x == d[0]) {
        return false;
    }
    let sum: u32 = d
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &x)| {
            if i % 2 == 1 {
                let y = x * 2;
                if y > 9 {
                    y - 9
                } else {
                    y
                }
            } else {
                x
            }
        })
        .sum();
    sum % 10 == 0
}

/// An IBAN whose mod-97 check holds (ISO 13616).
fn iban(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut remainder: u64 = 0;
    for c in tail.chars().chain(head.chars()) {
        let value = match c.to_digit(36) {
            Some(v) => v as u64,
            None => return false,
        };
        remainder = if value >= 10 {
            (remainder * 100 + value) % 97
        } else {
            (remainder * 10 + value) % 97
        };
    }
    remainder == 1
}

/// A US social security number that could be issued (no area 000, 666 or 9xx; no group 00;
/// no serial 0000).
fn ssn(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let [area, group, serial] = parts.as_slice() else {
        return false;
    };
    *area != "000"
        && *area != "666"
        && !area.starts_with('9')
        && *group != "00"
        && *serial != "0000"
}

/// An IPv4 or IPv6 address that parses (not a version string like `1.2.3`, nor a path like
/// `a::b`: an IPv6 address needs three groups).
fn ip(text: &str) -> bool {
    text.parse::<IpAddr>().is_ok()
        && (text.contains('.') || text.split(':').filter(|g| !g.is_empty()).count() >= 3)
}

/// A phone number: with a `+`, 9 to 15 digits (E.164); without, 9 to 11 digits (a national
/// number) written with separators — so long groups of digits (account numbers) are not taken.
fn phone(text: &str) -> bool {
    let n = digits(text).len();
    // The shape of a US social security number is the SSN detector's, valid or not.
    let ssn_shape = text.len() == 11 && text.as_bytes()[3] == b'-' && text.as_bytes()[6] == b'-';
    if ssn_shape {
        return false;
    }
    if text.starts_with('+') {
        (9..=15).contains(&n)
    } else {
        (9..=11).contains(&n) && text.contains([' ', '-', '.', '('])
    }
}

/// Shannon entropy of `text` in bits per character.
fn entropy(text: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    for c in text.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
    }
    let n = text.chars().count() as f64;
    counts
        .values()
        .map(|&k| {
            let p = k as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// A secret: a known shape, or a long token of letters and digits that looks random (both
/// letters and digits, ≥ 4 bits of entropy per character).
fn secret(text: &str) -> bool {
    let known = [
        "-----BEGIN",
        "eyJ",
        "sk-",
        "stk_",
        "AKIA",
        "gh",
        "xox",
        "AIza",
    ];
    if known.iter().any(|k| text.starts_with(k)) {
        return true;
    }
    let letters = text.chars().any(|c| c.is_ascii_alphabetic());
    let numbers = text.chars().any(|c| c.is_ascii_digit());
    letters && numbers && entropy(text) >= 4.0
}

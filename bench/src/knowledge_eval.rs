//! `stead bench knowledge --part eval` (docs/knowledge.md, "Evaluation"): retrieval quality
//! on this repository's own documentation with hand-written, hand-labelled questions
//! (`tests/fixtures/knowledge-eval/`: every `docs/*.md` cut at its `## ` headings into section
//! documents). The sections are embedded with the configured embedding route (the local
//! all-MiniLM-L6-v2 by default) into a scratch SQLite collection; each question is searched
//! exact, ANN and hybrid; a section is found when one of its chunks is. Reported: recall@5
//! (the share of a question's relevant sections among the first five sections found) and
//! MRR@10 (one over the rank of the first relevant section, 0 past ten), averaged.

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;
use stead_persistence::{CollectionKey, DEFAULT_PROJECT};

use anyhow::Context;
use serde_json::{json, Value};

use super::BenchDatabase;
use crate::cli::{BenchBackend, KnowledgeBenchArgs};
use stead_agents::knowledge::{Knowledge, Query, SearchMode};
use stead_config::Config;

/// `heading` as an id: lowercase, runs of other characters than ASCII letters and digits as
/// one `-`, none at either end.
pub fn slug(heading: &str) -> String {
    let mut out = String::new();
    for c in heading.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// The section documents of one Markdown file: `(id, text)`, as `corpus.py` cuts them.
pub fn sections(stem: &str, markdown: &str) -> Vec<(String, String)> {
    let mut sections = Vec::new();
    let mut id = format!("{stem}#intro");
    let mut lines: Vec<&str> = Vec::new();
    let mut fenced = false;
    for line in markdown.split('\n') {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with("## ") {
            sections.push((id, lines.join("\n")));
            id = format!("{stem}#{}", slug(line[3..].trim()));
            lines = vec![line];
        } else {
            lines.push(line);
        }
    }
    sections.push((id, lines.join("\n")));
    sections
        .into_iter()
        .enumerate()
        .filter(|(i, (_, text))| *i > 0 || text.split_whitespace().count() >= 20)
        .map(|(_, section)| section)
        .collect()
}

/// Every section document of the top-level `*.md` files of `dir`, by file name.
pub fn corpus(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "md"))
        .collect();
    names.sort();
    let mut documents = Vec::new();
    for path in names {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        documents.extend(sections(&stem, &std::fs::read_to_string(&path)?));
    }
    Ok(documents)
}

pub async fn eval(config: &Config, args: &KnowledgeBenchArgs) -> anyhow::Result<Value> {
    let documents = corpus(&args.docs)?;
    let questions: Vec<(String, Vec<String>)> = std::fs::read_to_string(&args.eval_queries)
        .with_context(|| format!("cannot read {}", args.eval_queries.display()))?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let v: Value = serde_json::from_str(line)?;
            let relevant = v["relevant"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            Ok((
                v["query"].as_str().unwrap_or_default().to_string(),
                relevant,
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    let known: HashSet<&str> = documents.iter().map(|(id, _)| id.as_str()).collect();
    for (_, relevant) in &questions {
        for id in relevant {
            anyhow::ensure!(
                known.contains(id.as_str()),
                "the label `{id}` names no section of {} (a heading changed? run corpus.py --check)",
                args.docs.display()
            );
        }
    }
    let db = BenchDatabase::create(config, BenchBackend::Sqlite).await?;
    let result = run(config, &documents, &questions, &db).await;
    db.remove().await?;
    result
}

async fn run(
    config: &Config,
    documents: &[(String, String)],
    questions: &[(String, Vec<String>)],
    db: &BenchDatabase,
) -> anyhow::Result<Value> {
    let store =
        stead_persistence::open(stead_persistence::StoreOptions::new(db.url.clone())).await?;
    let embedders = stead_agents::engines::start_embedding_models(config).await?;
    anyhow::ensure!(
        !embedders.is_empty(),
        "no embedding model is prepared (run `stead setup`)"
    );
    let router = stead_agents::models::build(config, &[], &embedders, None, (None, None))?;
    let knowledge = Knowledge::new(store.clone(), router, config.knowledge.clone());
    let fail = |e: stead_http::ApiError| anyhow::anyhow!("{}: {}", e.code.as_str(), e.message);
    knowledge
        .create_collection(&CollectionKey::new(DEFAULT_PROJECT, "docs"), None)
        .await
        .map_err(fail)?;
    let started = Instant::now();
    let mut seen = HashSet::new();
    for (n, (id, text)) in documents.iter().enumerate() {
        if !seen.insert(id.clone()) {
            continue; // a repeated heading: its first section stands
        }
        knowledge
            .put_document(
                &CollectionKey::new(DEFAULT_PROJECT, "docs"),
                id,
                text,
                None,
                None,
            )
            .await
            .map_err(fail)?;
        if (n + 1) % 20 == 0 {
            eprintln!("embedding sections: {}/{}", n + 1, documents.len());
        }
    }
    let ingest_s = started.elapsed().as_secs_f64();
    let chunks = knowledge
        .collection(&CollectionKey::new(DEFAULT_PROJECT, "docs"))
        .await
        .map_err(fail)?
        .chunks;
    let mut report = serde_json::Map::new();
    for mode in [SearchMode::Exact, SearchMode::Ann, SearchMode::Hybrid] {
        let (mut recall, mut mrr) = (0.0, 0.0);
        for (text, relevant) in questions {
            let query = Query {
                text: Some(text.clone()),
                vector: None,
                top_k: 40,
                filter: Default::default(),
                mode,
            };
            let hits = knowledge
                .query(
                    &CollectionKey::new(DEFAULT_PROJECT, "docs"),
                    query,
                    &Default::default(),
                )
                .await
                .map_err(fail)?;
            let mut sections: Vec<&str> = Vec::new();
            for hit in &hits {
                if !sections.contains(&hit.document_id.as_str()) {
                    sections.push(&hit.document_id);
                }
            }
            let first5 = &sections[..sections.len().min(5)];
            recall += relevant
                .iter()
                .filter(|r| first5.contains(&r.as_str()))
                .count() as f64
                / relevant.len().max(1) as f64;
            if let Some(rank) = sections
                .iter()
                .take(10)
                .position(|s| relevant.iter().any(|r| r == s))
            {
                mrr += 1.0 / (rank + 1) as f64;
            }
        }
        let n = questions.len().max(1) as f64;
        eprintln!(
            "{}: recall@5 {:.3}, MRR@10 {:.3}",
            mode.as_str(),
            recall / n,
            mrr / n
        );
        report.insert(
            mode.as_str().into(),
            json!({ "recall_at_5": recall / n, "mrr_at_10": mrr / n }),
        );
    }
    store.shutdown().await;
    Ok(json!({
        "sections": seen.len(),
        "chunks": chunks,
        "questions": questions.len(),
        "ingest_s": ingest_s,
        "results": report,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_cut_as_the_fixture_says() {
        assert_eq!(
            slug("Daylight-saving time (DST)"),
            "daylight-saving-time-dst"
        );
        let md = "# T\nshort intro\n## One: a\ntext\n```\n## not a heading\n```\n## Two\nmore";
        let cut = sections("f", md);
        let ids: Vec<&str> = cut.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["f#one-a", "f#two"]);
        assert!(cut[0].1.contains("## not a heading"));
        assert!(cut[0].1.starts_with("## One: a"));
    }
}

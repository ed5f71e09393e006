//! `stead bench knowledge --part query` (docs/benchmarks.md): a collection of `--index-chunks`
//! chunks (documents of 100 chunks, synthetic 384-dimension unit vectors: embedding 100,000 real
//! chunks on two cores takes hours) in a scratch database of `--backend`; then the time to
//! load it into a node's index, search latency (p50/p99 over `--queries` vector queries) of
//! exact search (the `i8` scan rescored in `f32`), of the plain `f32` scan it is measured
//! against, and of the HNSW graph (its build time too), with both recalls@10 against the `f32`
//! scan and the ratios to the targets.

use std::sync::Arc;
use std::time::Instant;
use stead_persistence::{CollectionKey, DEFAULT_PROJECT};

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};
use stead_persistence::{NewChunk, PutDocument, StoreOptions};
use stead_router::config::GatewayConfig;
use stead_router::{Providers, Router};

use super::BenchDatabase;
use crate::cli::{KnowledgeBenchArgs, SyntheticVectors};
use stead_agents::knowledge::{Knowledge, Query, SearchMode};
use stead_config::Config;
use stead_vectors::synthetic::{Corpus, Kind};

const DIMENSION: usize = 384;
/// Chunks per document.
const PER_DOCUMENT: usize = 100;
/// The targets (docs/benchmarks.md): exact p99, ANN p99 and recall, ANN build.
const EXACT_P99_MS: f64 = 10.0;
const ANN_P99_MS: f64 = 5.0;
const ANN_RECALL: f64 = 0.95;
const ANN_BUILD_S: f64 = 60.0;

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

pub async fn query(config: &Config, args: &KnowledgeBenchArgs) -> anyhow::Result<Value> {
    anyhow::ensure!(
        args.index_chunks >= PER_DOCUMENT && args.queries > 0,
        "--index-chunks must be at least {PER_DOCUMENT} and --queries at least 1"
    );
    let db = BenchDatabase::create(config, args.backend).await?;
    let result = run(config, args, &db).await;
    db.remove().await?;
    result
}

/// Latency of `search` over every probe, and what it found.
async fn timed<F, Fut>(
    probes: &[Vec<f32>],
    mut search: F,
) -> anyhow::Result<(Histogram<u64>, Vec<Vec<(String, i64)>>)>
where
    F: FnMut(Vec<f32>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<(String, i64)>>>,
{
    let mut histogram = Histogram::<u64>::new(3)?;
    let mut found = Vec::with_capacity(probes.len());
    for probe in probes {
        let t = Instant::now();
        let hits = search(probe.clone()).await?;
        histogram.record(t.elapsed().as_micros() as u64)?;
        found.push(hits);
    }
    Ok((histogram, found))
}

/// The share of `truth`'s hits that `got` also found.
fn recall(truth: &[Vec<(String, i64)>], got: &[Vec<(String, i64)>]) -> f64 {
    let wanted: usize = truth.iter().map(Vec::len).sum();
    let found: usize = truth
        .iter()
        .zip(got)
        .map(|(t, g)| g.iter().filter(|hit| t.contains(hit)).count())
        .sum();
    found as f64 / wanted.max(1) as f64
}

fn summary(h: &Histogram<u64>) -> Value {
    json!({ "p50": ms(h, 0.5), "p99": ms(h, 0.99) })
}

async fn run(
    config: &Config,
    args: &KnowledgeBenchArgs,
    db: &BenchDatabase,
) -> anyhow::Result<Value> {
    let store = stead_persistence::open(StoreOptions::new(db.url.clone())).await?;
    let key = CollectionKey::new(DEFAULT_PROJECT, "bench");
    store.create_collection(&key, "embed").await?;
    let documents = args.index_chunks / PER_DOCUMENT;
    let kind = match args.vectors {
        SyntheticVectors::Structured => Kind::Structured,
        SyntheticVectors::Uniform => Kind::Uniform,
    };
    let mut corpus = Corpus::new(kind, DIMENSION, documents, 0x5eed);
    let started = Instant::now();
    write_documents(store.as_ref(), documents, &mut corpus).await?;
    let write_s = started.elapsed().as_secs_f64();
    let router = Arc::new(Router::new(
        &[],
        GatewayConfig::default(),
        &Providers::new(),
        None,
    )?);
    let knowledge = Knowledge::new(store.clone(), router, config.knowledge.clone());
    let started = Instant::now();
    let index = knowledge
        .index(&key)
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let load_s = started.elapsed().as_secs_f64();
    eprintln!(
        "index loaded: {} chunks in {load_s:.2}s",
        index.chunks.len()
    );
    let probes: Vec<Vec<f32>> = (0..args.queries)
        .map(|i| corpus.vector(i * 7_919 % documents))
        .collect();
    let named = |ranked: Vec<(usize, f32)>| -> Vec<(String, i64)> {
        ranked
            .into_iter()
            .map(|(p, _)| {
                (
                    index.chunks[p].document_id.clone(),
                    index.chunks[p].chunk_index,
                )
            })
            .collect()
    };
    let search = |mode: SearchMode, filter: bool| {
        let knowledge = &knowledge;
        let key = &key;
        move |vector: Vec<f32>| async move {
            let query = Query {
                text: None,
                vector: Some(vector),
                top_k: 10,
                filter: if filter {
                    serde_json::from_value(json!({ "group": 3 })).unwrap_or_default()
                } else {
                    Default::default()
                },
                mode,
            };
            let hits = knowledge
                .query(key, query, &Default::default())
                .await
                .map_err(|e| anyhow::anyhow!(e.message))?;
            Ok(hits
                .into_iter()
                .map(|h| (h.document_id, h.chunk_index))
                .collect::<Vec<_>>())
        }
    };
    let none = Map::new();
    let (f32_scan, truth) = timed(&probes, |v| {
        let found = named(index.exact_f32(&v, 10, &none));
        async move { Ok(found) }
    })
    .await?;
    let (exact, exact_found) = timed(&probes, search(SearchMode::Exact, false)).await?;
    let (filtered, _) = timed(&probes, search(SearchMode::Exact, true)).await?;
    let exact_recall = recall(&truth, &exact_found);
    eprintln!(
        "exact: p50 {:.2} ms, p99 {:.2} ms, recall@10 {exact_recall:.4} (the f32 scan: p50 {:.2} ms, p99 {:.2} ms)",
        ms(&exact, 0.5),
        ms(&exact, 0.99),
        ms(&f32_scan, 0.5),
        ms(&f32_scan, 0.99),
    );

    // The graph is built by the first ANN query.
    let t = Instant::now();
    timed(&probes[..1], search(SearchMode::Ann, false)).await?;
    let graph_s = t.elapsed().as_secs_f64();
    eprintln!("HNSW graph built in {graph_s:.1}s");
    let (ann, ann_found) = timed(&probes, search(SearchMode::Ann, false)).await?;
    let (ann_filtered, _) = timed(&probes, search(SearchMode::Ann, true)).await?;
    let ann_recall = recall(&truth, &ann_found);
    eprintln!(
        "ann: p50 {:.2} ms, p99 {:.2} ms, recall@10 {ann_recall:.4}",
        ms(&ann, 0.5),
        ms(&ann, 0.99)
    );
    let (rss, peak) = super::process_memory(std::process::id());
    store.shutdown().await;
    Ok(json!({
        "backend": format!("{:?}", args.backend).to_lowercase(),
        "vectors": format!("{:?}", args.vectors).to_lowercase(),
        "kernel": stead_vectors::kernel(),
        "chunks": index.chunks.len(),
        "dimension": DIMENSION,
        "queries": probes.len(),
        "write_s": write_s,
        "load_s": load_s,
        "f32_scan_ms": summary(&f32_scan),
        "exact_ms": summary(&exact),
        "exact_recall_at_10": exact_recall,
        "exact_filtered_ms": summary(&filtered),
        "exact_p99_over_target": ms(&exact, 0.99) / EXACT_P99_MS,
        "exact_p99_over_f32_scan_p99": ms(&exact, 0.99) / ms(&f32_scan, 0.99),
        "ann_build_s": graph_s,
        "ann_build_over_target": graph_s / ANN_BUILD_S,
        "ann_ms": summary(&ann),
        "ann_filtered_ms": summary(&ann_filtered),
        "ann_p99_over_target": ms(&ann, 0.99) / ANN_P99_MS,
        "ann_recall_at_10": ann_recall,
        "ann_recall_over_target": ann_recall / ANN_RECALL,
        "rss_mib": rss as f64 / (1024.0 * 1024.0),
        "peak_rss_mib": peak as f64 / (1024.0 * 1024.0),
    }))
}

/// `documents` synthetic documents of `PER_DOCUMENT` chunks each.
async fn write_documents(
    store: &dyn stead_persistence::JournalStore,
    documents: usize,
    corpus: &mut Corpus,
) -> anyhow::Result<()> {
    let started = Instant::now();
    for d in 0..documents {
        let chunks: Vec<NewChunk> = (0..PER_DOCUMENT)
            .map(|c| NewChunk {
                text: format!("document {d} chunk {c}"),
                embedding: corpus.vector(d),
            })
            .collect();
        store
            .put_document(PutDocument {
                collection: CollectionKey::new(DEFAULT_PROJECT, "bench"),
                id: format!("doc-{d:05}"),
                text: format!("document {d}"),
                metadata: json!({ "group": d % 10 }),
                sha256: format!("{d}"),
                model: "synthetic".into(),
                chunks,
            })
            .await?;
        if (d + 1) % 100 == 0 {
            eprintln!(
                "writing: {} of {} chunks ({:.0}s)",
                (d + 1) * PER_DOCUMENT,
                documents * PER_DOCUMENT,
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}

//! `stead bench knowledge --part query` (docs/benchmarks.md): a collection of `--index-chunks`
//! chunks (documents of 100 chunks, synthetic 384-dimension unit vectors: embedding 100,000 real
//! chunks on two cores takes hours) in a scratch database of `--backend`; then the time to
//! load it into a node's index, exact-search latency (p50/p99 over `--queries` vector queries),
//! the HNSW graph's build time, its latency and its recall@10 against exact search.

use std::sync::Arc;
use std::time::Instant;
use stead_persistence::{CollectionKey, DEFAULT_PROJECT};

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use stead_persistence::{NewChunk, PutDocument, StoreOptions};
use stead_router::config::GatewayConfig;
use stead_router::{Providers, Router};

use super::BenchDatabase;
use crate::cli::KnowledgeBenchArgs;
use stead_agents::knowledge::{Knowledge, Query, SearchMode};
use stead_config::Config;

const DIMENSION: usize = 384;
/// Chunks per document.
const PER_DOCUMENT: usize = 100;

/// A deterministic unit vector.
fn vector(state: &mut u64) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DIMENSION)
        .map(|_| {
            *state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((*state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

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

async fn run(
    config: &Config,
    args: &KnowledgeBenchArgs,
    db: &BenchDatabase,
) -> anyhow::Result<Value> {
    let store = stead_persistence::open(StoreOptions::new(db.url.clone())).await?;
    store
        .create_collection(&CollectionKey::new(DEFAULT_PROJECT, "bench"), "embed")
        .await?;
    let documents = args.index_chunks / PER_DOCUMENT;
    let mut state = 0x5eed_u64;
    let started = Instant::now();
    write_documents(store.as_ref(), documents, &mut state).await?;
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
        .index(&CollectionKey::new(DEFAULT_PROJECT, "bench"))
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let load_s = started.elapsed().as_secs_f64();
    eprintln!(
        "index loaded: {} chunks in {load_s:.2}s",
        index.chunks.len()
    );

    let probes: Vec<Vec<f32>> = (0..args.queries).map(|_| vector(&mut state)).collect();
    let search = |mode: SearchMode, vector: &[f32], filter: bool| Query {
        text: None,
        vector: Some(vector.to_vec()),
        top_k: 10,
        filter: if filter {
            serde_json::from_value(json!({ "group": 3 })).unwrap_or_default()
        } else {
            Default::default()
        },
        mode,
    };
    let mut exact = Histogram::<u64>::new(3)?;
    let mut filtered = Histogram::<u64>::new(3)?;
    let mut truth = Vec::new();
    for probe in &probes {
        let t = Instant::now();
        let hits = knowledge
            .query(
                &CollectionKey::new(DEFAULT_PROJECT, "bench"),
                search(SearchMode::Exact, probe, false),
                &Default::default(),
            )
            .await
            .map_err(|e| anyhow::anyhow!(e.message))?;
        exact.record(t.elapsed().as_micros() as u64)?;
        truth.push(hits);
        let t = Instant::now();
        knowledge
            .query(
                &CollectionKey::new(DEFAULT_PROJECT, "bench"),
                search(SearchMode::Exact, probe, true),
                &Default::default(),
            )
            .await
            .map_err(|e| anyhow::anyhow!(e.message))?;
        filtered.record(t.elapsed().as_micros() as u64)?;
    }
    eprintln!(
        "exact: p50 {:.1} ms, p99 {:.1} ms",
        ms(&exact, 0.5),
        ms(&exact, 0.99)
    );

    // The graph is built by the first ANN query.
    let t = Instant::now();
    knowledge
        .query(
            &CollectionKey::new(DEFAULT_PROJECT, "bench"),
            search(SearchMode::Ann, &probes[0], false),
            &Default::default(),
        )
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?;
    let graph_s = t.elapsed().as_secs_f64();
    eprintln!("HNSW graph built in {graph_s:.1}s");
    let mut ann = Histogram::<u64>::new(3)?;
    let mut found = 0usize;
    for (probe, exact_hits) in probes.iter().zip(&truth) {
        let t = Instant::now();
        let hits = knowledge
            .query(
                &CollectionKey::new(DEFAULT_PROJECT, "bench"),
                search(SearchMode::Ann, probe, false),
                &Default::default(),
            )
            .await
            .map_err(|e| anyhow::anyhow!(e.message))?;
        ann.record(t.elapsed().as_micros() as u64)?;
        found += hits
            .iter()
            .filter(|h| {
                exact_hits
                    .iter()
                    .any(|e| e.document_id == h.document_id && e.chunk_index == h.chunk_index)
            })
            .count();
    }
    let recall = found as f64 / (probes.len() * 10) as f64;
    let (rss, peak) = super::process_memory(std::process::id());
    store.shutdown().await;
    Ok(json!({
        "backend": format!("{:?}", args.backend).to_lowercase(),
        "chunks": index.chunks.len(),
        "dimension": DIMENSION,
        "queries": probes.len(),
        "write_s": write_s,
        "load_s": load_s,
        "exact_ms": { "p50": ms(&exact, 0.5), "p99": ms(&exact, 0.99) },
        "exact_filtered_ms": { "p50": ms(&filtered, 0.5), "p99": ms(&filtered, 0.99) },
        "ann_build_s": graph_s,
        "ann_ms": { "p50": ms(&ann, 0.5), "p99": ms(&ann, 0.99) },
        "ann_recall_at_10": recall,
        "rss_mib": rss as f64 / (1024.0 * 1024.0),
        "peak_rss_mib": peak as f64 / (1024.0 * 1024.0),
    }))
}

/// `documents` synthetic documents of `PER_DOCUMENT` chunks each, with random vectors.
async fn write_documents(
    store: &dyn stead_persistence::JournalStore,
    documents: usize,
    state: &mut u64,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let per_document = PER_DOCUMENT;
    for d in 0..documents {
        let chunks: Vec<NewChunk> = (0..per_document)
            .map(|c| NewChunk {
                text: format!("document {d} chunk {c}"),
                embedding: vector(state),
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
                (d + 1) * per_document,
                documents * per_document,
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}

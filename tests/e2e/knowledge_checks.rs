//! Knowledge checks that need no server: the retrieval evaluation's labels against `docs/`,
//! and the short run of `stead bench knowledge --part query`.

use serde_json::Value;

/// The evaluation's labels name sections that exist: a heading renamed in `docs/` without
/// relabelling `tests/fixtures/knowledge-eval/queries.jsonl` fails here, not in the benchmark.
#[test]
fn the_retrieval_evaluation_labels_name_existing_sections() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/knowledge-eval");
    let output = std::process::Command::new("python3")
        .arg(format!("{dir}/corpus.py"))
        .arg("--check")
        .arg(format!("{dir}/queries.jsonl"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The short run of `stead bench knowledge --part query` (the figures in docs/benchmarks.md
/// come from 100,000 chunks and a release build; the graph's distance function is this
/// crate's code, slow unoptimized): it loads, searches exactly and by the HNSW graph, and the
/// graph finds most of what exact search finds.
#[test]
fn the_query_benchmark_runs() {
    let data = tempfile::tempdir().unwrap();
    let output = stead_testkit::stead::command()
        .args([
            "bench",
            "knowledge",
            "--part",
            "query",
            "--index-chunks",
            "300",
            "--queries",
            "20",
            "--data-dir",
        ])
        .arg(data.path())
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["chunks"], 300);
    assert!(report["exact_ms"]["p99"].as_f64().unwrap() > 0.0);
    assert!(
        report["ann_recall_at_10"].as_f64().unwrap() >= 0.8,
        "{report}"
    );
}

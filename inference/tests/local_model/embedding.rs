//! The embedding model `stead setup` prepares (all-MiniLM-L6-v2, int8 weights), on the real
//! ONNX Runtime: the reference vector of "hello world" (sentence-transformers' mean pooling
//! and normalisation; the first values as the upstream fp32 model gives them, within the int8
//! export's error), related sentences closer than unrelated ones, a padded batch equal to each
//! text alone, and text beyond the model's 256 tokens cut rather than refused.

use stead_inference::embedding::{Embedder, DEFAULT_EMBEDDING_MODEL};

use super::data_dir;

fn embedder() -> Embedder {
    let data = data_dir();
    let env =
        stead_inference::engine::init_runtime(&data.join("runtime").join("libonnxruntime.so"))
            .expect("ONNX Runtime");
    Embedder::load(&env, &data.join("models").join(DEFAULT_EMBEDDING_MODEL), 1)
        .expect("the embedding model (run `stead setup`)")
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn the_embedding_model_matches_its_reference_and_ranks_meaning() {
    let mut embedder = embedder();
    assert_eq!(embedder.dimension(), 384);
    let hello = embedder.embed(&["hello world"]).unwrap().remove(0);
    assert!((dot(&hello, &hello) - 1.0).abs() < 1e-4, "unit length");
    let reference = [-0.0348, 0.0301, 0.0130, 0.0254, -0.0375];
    for (got, want) in hello.iter().zip(reference) {
        assert!((got - want).abs() < 3e-3, "{:?}", &hello[..5]);
    }

    let texts = [
        "A cat sits on the mat.",
        "A kitten is resting on a rug.",
        "Tax returns are due in April.",
    ];
    let batch = embedder.embed(&texts).unwrap();
    let (cat, kitten, tax) = (&batch[0], &batch[1], &batch[2]);
    let related = dot(cat, kitten);
    let unrelated = dot(cat, tax);
    assert!(
        related > 0.4 && related > unrelated + 0.3,
        "cat~kitten {related}, cat~tax {unrelated}"
    );
    // Padding to the batch's longest text changes nothing.
    for (text, in_batch) in texts.iter().zip(&batch) {
        let alone = embedder.embed(&[text]).unwrap().remove(0);
        let diff = alone
            .iter()
            .zip(in_batch)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff < 1e-4, "{text}: {diff}");
    }

    // A text longer than the model takes is cut at 256 tokens, not refused.
    let long = "stead journals every step of a session ".repeat(200);
    assert!(embedder.count_tokens(&long).unwrap() > 1000);
    let cut = embedder.embed(&[&long]).unwrap();
    assert_eq!(cut[0].len(), 384);
}

/// Concurrent requests share model runs: twenty one-text requests at once are answered by
/// fewer runs than requests, each with the vector its text gets alone.
#[test]
fn the_embedding_pool_batches_concurrent_requests() {
    use stead_inference::embedding_pool::{EmbeddingPool, EmbeddingPoolConfig};

    let data = data_dir();
    let mut config = EmbeddingPoolConfig::new(
        data.join("models").join(DEFAULT_EMBEDDING_MODEL),
        data.join("runtime").join("libonnxruntime.so"),
    );
    config.threads = 1;
    let texts: Vec<String> = (0..20)
        .map(|i| format!("document number {i} about durable agents"))
        .collect();
    let (vectors, (runs, embedded)) = super::runtime().block_on(async {
        let pool = std::sync::Arc::new(EmbeddingPool::start(config).await.unwrap());
        assert_eq!(pool.dimension(), 384);
        let (warm_runs, _) = pool.counts();
        let requests: Vec<_> = texts
            .iter()
            .map(|text| {
                let pool = pool.clone();
                let text = text.clone();
                tokio::spawn(async move { pool.embed(vec![text]).await.unwrap().remove(0) })
            })
            .collect();
        let mut vectors = Vec::new();
        for request in requests {
            vectors.push(request.await.unwrap());
        }
        let (runs, embedded) = pool.counts();
        (vectors, (runs - warm_runs, embedded))
    });
    assert_eq!(embedded, 20);
    assert!(runs < 20, "{runs} runs for 20 concurrent requests");
    let mut alone = embedder();
    for (text, vector) in texts.iter().zip(&vectors) {
        let expected = alone.embed(&[text]).unwrap().remove(0);
        let diff = expected
            .iter()
            .zip(vector)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff < 1e-4, "{text}: {diff}");
    }
}

/// A request split across two sessions — sorted by length, cut into small runs, the runs taken
/// by both sessions at once — answers every text, in the request's order, with the vector the
/// text gets alone, and counts the tokens the model was given.
#[test]
fn a_request_split_across_sessions_keeps_each_texts_vector_and_order() {
    use stead_inference::embedding_pool::{EmbeddingPool, EmbeddingPoolConfig};

    let data = data_dir();
    let mut config = EmbeddingPoolConfig::new(
        data.join("models").join(DEFAULT_EMBEDDING_MODEL),
        data.join("runtime").join("libonnxruntime.so"),
    );
    config.workers = 2;
    config.threads = 1;
    // Lengths from a few tokens to past the model's cut, shuffled: several runs of each size.
    let texts: Vec<String> = (0..40)
        .map(|i| {
            let words = [3, 60, 12, 300, 1, 25, 90, 7][i % 8];
            format!(
                "text {i}: {}",
                "durable agents journal every step ".repeat(words)
            )
        })
        .collect();
    let embedded = super::runtime().block_on(async {
        let pool = EmbeddingPool::start(config).await.unwrap();
        let embedded = pool.embed_counted(texts.clone()).await.unwrap();
        let (runs, count) = pool.counts();
        assert!(runs >= 1 && count >= 40, "{runs} runs, {count} texts");
        embedded
    });
    assert_eq!(embedded.vectors.len(), texts.len());
    let mut alone = embedder();
    let mut tokens = 0;
    for (text, vector) in texts.iter().zip(&embedded.vectors) {
        let (expected, counted) = alone.embed_counted(&[text]).unwrap();
        tokens += counted[0];
        let diff = expected[0]
            .iter()
            .zip(vector)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff < 1e-4, "{}: {diff}", &text[..12]);
    }
    assert_eq!(embedded.tokens, tokens);
}

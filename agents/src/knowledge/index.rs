//! A collection's search index, in memory (docs/knowledge.md, "Search"): every chunk's
//! embedding in one flat array for exact search (a dot product per chunk; embeddings have unit
//! length, so the score is the cosine similarity; the scan is `stead_vectors::Flat`'s), BM25
//! over the chunks' words, an HNSW graph for approximate search (USearch, built on the first
//! `ann` query), and reciprocal-rank fusion of vectors and BM25 for hybrid search. An index is one version of its collection: the service
//! builds a new one when the stored version moves.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use serde_json::{Map, Value};
use stead_persistence::CollectionChunks;
use stead_vectors::{best, Flat, Graph, GraphOptions, RowFilter};

/// BM25's parameters (the usual ones).
const K1: f32 = 1.2;
const B: f32 = 0.75;
/// Reciprocal-rank fusion's constant (Cormack et al.).
const RRF_K: f32 = 60.0;
/// Candidates per list fused by hybrid search, at least.
const FUSED_DEPTH: usize = 50;

/// Words BM25 leaves out: they match nearly every chunk.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "how", "i", "if",
    "in", "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "what", "when",
    "which", "who", "why", "will", "with", "can", "my", "me", "we", "you", "your",
];

/// One chunk as the index keeps it.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub document_id: String,
    pub chunk_index: i64,
    pub text: String,
    pub metadata: Value,
}

/// The words BM25 counts: lowercase letters and digits, stopwords left out.
pub fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

/// A search's ranked chunks: `(chunk position, score)`, best first.
pub use stead_vectors::Ranked;

pub struct Index {
    pub version: i64,
    pub model: Option<String>,
    pub dimension: usize,
    pub chunks: Vec<Chunk>,
    vectors: Flat,
    /// Each chunk's document, as a position in `documents` (chunks of one document are
    /// adjacent and share its metadata: a filter is decided once per document).
    document_of: Vec<u32>,
    /// The first chunk of each document.
    documents: Vec<usize>,
    /// Every metadata field some document has (a filter may name only these).
    pub fields: BTreeSet<String>,
    /// term → (chunk, occurrences in it).
    postings: HashMap<String, Vec<(u32, u32)>>,
    lengths: Vec<u32>,
    average_length: f32,
    /// Built on the first `ann` query; `None` when building failed (logged; `ann` then
    /// searches exactly, like a failed graph search).
    graph: OnceLock<Option<Graph>>,
}

impl Index {
    /// The index of one version of a collection. Chunks are ordered by document id (bytes)
    /// and position, whatever order the database returned them in, so that ties rank alike on
    /// both backends.
    pub fn build(loaded: CollectionChunks) -> Index {
        let mut rows = loaded.chunks;
        rows.sort_by(|a, b| {
            (a.document_id.as_bytes(), a.chunk_index)
                .cmp(&(b.document_id.as_bytes(), b.chunk_index))
        });
        let dimension = rows.first().map_or(0, |c| c.embedding.len());
        let mut vectors = Vec::with_capacity(rows.len() * dimension);
        let mut fields = BTreeSet::new();
        let mut postings: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(rows.len());
        let mut chunks: Vec<Chunk> = Vec::with_capacity(rows.len());
        let mut document_of = Vec::with_capacity(rows.len());
        let mut documents = Vec::new();
        for (position, row) in rows.into_iter().enumerate() {
            if chunks
                .last()
                .is_none_or(|last| last.document_id != row.document_id)
            {
                documents.push(position);
            }
            document_of.push(documents.len() as u32 - 1);
            if row.embedding.len() == dimension {
                vectors.extend_from_slice(&row.embedding);
            } else {
                // The store refuses mixed dimensions; a row that has one anyway must not shift
                // every later row: it is padded or cut to the collection's dimension.
                tracing::error!(
                    document = %row.document_id,
                    chunk = row.chunk_index,
                    dimension = row.embedding.len(),
                    expected = dimension,
                    "a chunk's embedding has the wrong dimension"
                );
                vectors.extend(
                    row.embedding
                        .iter()
                        .copied()
                        .chain(std::iter::repeat(0.0))
                        .take(dimension),
                );
            }
            if let Value::Object(map) = &row.metadata {
                fields.extend(map.keys().cloned());
            }
            let words = terms(&row.text);
            lengths.push(words.len() as u32);
            let mut counts: HashMap<String, u32> = HashMap::new();
            for word in words {
                *counts.entry(word).or_default() += 1;
            }
            for (word, count) in counts {
                postings
                    .entry(word)
                    .or_default()
                    .push((position as u32, count));
            }
            chunks.push(Chunk {
                document_id: row.document_id,
                chunk_index: row.chunk_index,
                text: row.text,
                metadata: row.metadata,
            });
        }
        let average_length = if lengths.is_empty() {
            0.0
        } else {
            lengths.iter().map(|&l| l as f32).sum::<f32>() / lengths.len() as f32
        };
        Index {
            version: loaded.collection.version,
            model: loaded.collection.model,
            dimension,
            chunks,
            vectors: Flat::new(dimension, vectors),
            document_of,
            documents,
            fields,
            postings,
            lengths,
            average_length,
            graph: OnceLock::new(),
        }
    }

    /// Per document, whether its metadata has every field of `filter` with that value; `None`
    /// for an empty filter (every chunk matches).
    fn allowed(&self, filter: &Map<String, Value>) -> Option<Vec<bool>> {
        (!filter.is_empty()).then(|| {
            self.documents
                .iter()
                .map(|&first| {
                    filter
                        .iter()
                        .all(|(field, value)| self.chunks[first].metadata.get(field) == Some(value))
                })
                .collect()
        })
    }

    /// The chunks `allowed` (from [`Index::allowed`]) keeps, for the vector search.
    fn row_filter<'a>(&'a self, allowed: &'a Option<Vec<bool>>) -> Option<RowFilter<'a>> {
        allowed.as_deref().map(|allowed| RowFilter {
            groups: &self.document_of,
            allowed,
        })
    }

    /// The matching chunks' cosine similarity to `query` (unit length), the best `k`: the
    /// `i8` scan, rescored exactly (`stead_vectors::Flat::top_k`).
    pub fn exact(&self, query: &[f32], k: usize, filter: &Map<String, Value>) -> Ranked {
        let allowed = self.allowed(filter);
        self.vectors.top_k(query, k, self.row_filter(&allowed))
    }

    /// Every matching chunk's `f32` similarity to `query`, the best `k`: what [`Index::exact`]
    /// is measured against.
    pub fn exact_f32(&self, query: &[f32], k: usize, filter: &Map<String, Value>) -> Ranked {
        let allowed = self.allowed(filter);
        self.vectors.top_k_f32(query, k, self.row_filter(&allowed))
    }

    /// Whether the HNSW graph is built.
    pub fn has_graph(&self) -> bool {
        self.graph.get().is_some()
    }

    /// The HNSW graph's nearest chunks to `query` among those matching the filter, rescored
    /// exactly, the best `k`. The first call builds the graph (USearch, on every core; about
    /// a minute for 100,000 chunks of 384 dimensions on two cores), logging its progress.
    pub fn ann(&self, query: &[f32], k: usize, filter: &Map<String, Value>) -> Ranked {
        if self.chunks.is_empty() || self.dimension == 0 {
            return Vec::new();
        }
        let graph = self.graph.get_or_init(|| {
            let total = self.chunks.len();
            let started = std::time::Instant::now();
            let tenth = (total / 10).max(1);
            let graph = Graph::build(&self.vectors, GraphOptions::default(), &|done| {
                if done % tenth < (total / 100).max(1) {
                    tracing::info!(done, total, "building the ANN graph");
                }
            });
            match graph {
                Ok(graph) => {
                    let seconds = started.elapsed().as_secs_f64();
                    tracing::info!(chunks = total, seconds, "ANN graph built");
                    Some(graph)
                }
                Err(error) => {
                    tracing::error!(%error, "the ANN graph could not be built; searching exactly");
                    None
                }
            }
        });
        let allowed = self.allowed(filter);
        let found = graph
            .as_ref()
            .map(|g| g.search(&self.vectors, query, k, self.row_filter(&allowed)));
        match found {
            Some(Ok(ranked)) => ranked,
            Some(Err(error)) => {
                tracing::error!(%error, "an ANN search failed; searching exactly");
                self.exact(query, k, filter)
            }
            None => self.exact(query, k, filter),
        }
    }

    /// BM25 over the chunks' words; the best `k` with a positive score.
    pub fn bm25(&self, text: &str, k: usize, filter: &Map<String, Value>) -> Ranked {
        let n = self.chunks.len() as f32;
        let mut scores: HashMap<usize, f32> = HashMap::new();
        let mut query_terms = terms(text);
        query_terms.sort();
        query_terms.dedup();
        for term in query_terms {
            let Some(postings) = self.postings.get(&term) else {
                continue;
            };
            let df = postings.len() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(position, count) in postings {
                let tf = count as f32;
                let length = self.lengths[position as usize] as f32;
                let norm = K1 * (1.0 - B + B * length / self.average_length.max(1.0));
                *scores.entry(position as usize).or_default() +=
                    idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        let allowed = self.allowed(filter);
        let keep = self.row_filter(&allowed);
        let scored = scores
            .into_iter()
            .filter(|&(p, s)| s > 0.0 && keep.is_none_or(|f| f.keeps(p)));
        best(scored, k)
    }

    /// Reciprocal-rank fusion of exact vector search and BM25 (each list `max(4k, 50)` deep):
    /// a chunk scores the sum of `1 / (60 + rank)` over the lists it is in.
    pub fn hybrid(
        &self,
        query: &[f32],
        text: &str,
        k: usize,
        filter: &Map<String, Value>,
    ) -> Ranked {
        let depth = (4 * k).max(FUSED_DEPTH);
        let mut fused: HashMap<usize, f32> = HashMap::new();
        for list in [
            self.exact(query, depth, filter),
            self.bm25(text, depth, filter),
        ] {
            for (rank, (position, _)) in list.into_iter().enumerate() {
                *fused.entry(position).or_default() += 1.0 / (RRF_K + rank as f32 + 1.0);
            }
        }
        best(fused.into_iter(), k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stead_persistence::{ChunkRow, CollectionRow};

    fn index(rows: &[(&str, &str, [f32; 2], Value)]) -> Index {
        Index::build(CollectionChunks {
            collection: CollectionRow {
                project_id: stead_persistence::DEFAULT_PROJECT,
                name: "c".into(),
                embedding_route: "embed".into(),
                model: Some("m".into()),
                dimension: Some(2),
                documents: rows.len() as i64,
                chunks: rows.len() as i64,
                version: 7,
                created_at: chrono::Utc::now(),
                updated_at: chrono::Utc::now(),
            },
            chunks: rows
                .iter()
                .map(|(id, text, v, meta)| ChunkRow {
                    document_id: (*id).into(),
                    chunk_index: 0,
                    text: (*text).into(),
                    embedding: v.to_vec(),
                    metadata: meta.clone(),
                })
                .collect(),
        })
    }

    fn ids(index: &Index, ranked: &Ranked) -> Vec<String> {
        ranked
            .iter()
            .map(|(p, _)| index.chunks[*p].document_id.clone())
            .collect()
    }

    #[test]
    fn exact_ann_bm25_and_hybrid_rank_as_expected() {
        let s = std::f32::consts::FRAC_1_SQRT_2;
        let ix = index(&[
            (
                "b",
                "green tea steeping temperature",
                [1.0, 0.0],
                serde_json::json!({"t": "x"}),
            ),
            (
                "a",
                "bicycle tyre repair",
                [0.0, 1.0],
                serde_json::json!({"t": "y"}),
            ),
            (
                "c",
                "tea and bicycles",
                [s, s],
                serde_json::json!({"t": "x"}),
            ),
        ]);
        assert_eq!(ix.fields.iter().collect::<Vec<_>>(), ["t"]);
        let none = Map::new();
        // Sorted by id whatever the load order: a, b, c.
        assert_eq!(ix.chunks[0].document_id, "a");
        let exact = ix.exact(&[1.0, 0.0], 3, &none);
        assert_eq!(ids(&ix, &exact), ["b", "c", "a"]);
        assert!((exact[0].1 - 1.0).abs() < 1e-6);
        assert!((exact[1].1 - s).abs() < 1e-6);
        assert_eq!(ids(&ix, &ix.ann(&[1.0, 0.0], 2, &none)), ["b", "c"]);
        let filter: Map<String, Value> = serde_json::from_str(r#"{"t":"y"}"#).unwrap();
        assert_eq!(ids(&ix, &ix.exact(&[1.0, 0.0], 3, &filter)), ["a"]);
        assert_eq!(ids(&ix, &ix.bm25("bicycle repair", 3, &none)), ["a"]);
        // The shorter chunk first (BM25 normalises by length).
        assert_eq!(ids(&ix, &ix.bm25("the tea", 3, &none)), ["c", "b"]);
        // Hybrid: "c" is in both lists (second by vector, first by words), "b" first by
        // vector only.
        let hybrid = ix.hybrid(&[1.0, 0.0], "bicycles", 3, &none);
        assert_eq!(ids(&ix, &hybrid), ["c", "b", "a"]);
    }

    #[test]
    fn terms_drop_stopwords_and_punctuation() {
        assert_eq!(terms("How do I fix the Tyre?"), ["fix", "tyre"]);
    }
}

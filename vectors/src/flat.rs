//! Every embedding of a collection in one flat row-major array, and search over it. Each row is
//! also kept as `i8` (scaled by its largest magnitude to ±127): a search scans those (a quarter
//! of the memory traffic of `f32`, which is what limits a scan of 100,000 rows), keeps the best
//! `max(4k, 64)` in a bounded heap, and scores those again exactly in `f32`; the answer's scores
//! are exact, and a row is missed only if rounding to `i8` moved it from the best `k` to below
//! that depth (measured: `stead bench knowledge --part query`, recall against the `f32` scan).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::dot::{dot, dot_i8};

/// Rows scored exactly after the `i8` scan: `max(RESCORE_FACTOR × k, RESCORE_MIN)`.
const RESCORE_FACTOR: usize = 4;
const RESCORE_MIN: usize = 64;

/// A search's ranked rows: `(row, score)`, best first.
pub type Ranked = Vec<(usize, f32)>;

/// Which rows a search may return: row `r` is kept when `allowed[groups[r]]` (a knowledge
/// collection's groups are its documents, whose metadata a filter reads). A plain structure
/// rather than a closure: the scan is not generic, so it runs as optimized as this crate
/// whatever the caller's build.
#[derive(Debug, Clone, Copy)]
pub struct RowFilter<'a> {
    pub groups: &'a [u32],
    pub allowed: &'a [bool],
}

impl RowFilter<'_> {
    #[inline]
    pub fn keeps(&self, row: usize) -> bool {
        self.groups
            .get(row)
            .and_then(|&g| self.allowed.get(g as usize))
            .copied()
            .unwrap_or(false)
    }
}

/// Whether `filter` (none: every row) keeps `row`.
#[inline]
pub(crate) fn kept(filter: Option<RowFilter<'_>>, row: usize) -> bool {
    filter.is_none_or(|f| f.keeps(row))
}

/// Rows of `dimension` floats each.
pub struct Flat {
    dimension: usize,
    values: Vec<f32>,
    /// Each row rounded to `i8` after multiplying by `scales[row]`.
    quantized: Vec<i8>,
    scales: Vec<f32>,
}

/// `values` multiplied by `limit / max |value|` and rounded, and that factor (1 for all zeros).
fn scaled(values: &[f32], limit: f32) -> (impl Iterator<Item = f32> + '_, f32) {
    let largest = values.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = if largest > 0.0 { limit / largest } else { 1.0 };
    (values.iter().map(move |v| (v * scale).round()), scale)
}

/// A scored row in the heap: the *worst* of the kept rows is the greatest, so it is the one
/// `peek` shows and `pop` removes. Lower scores are worse; at equal scores the later row is.
#[derive(PartialEq)]
struct Kept(f32, usize);

impl Eq for Kept {}

impl Ord for Kept {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.total_cmp(&self.0).then(self.1.cmp(&other.1))
    }
}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The best `k` of `scored`, best first; ties go to the earlier row.
pub fn best(scored: impl Iterator<Item = (usize, f32)>, k: usize) -> Ranked {
    if k == 0 {
        return Vec::new();
    }
    let mut heap: BinaryHeap<Kept> = BinaryHeap::with_capacity(k + 1);
    for (row, score) in scored {
        let candidate = Kept(score, row);
        if heap.len() < k {
            heap.push(candidate);
        } else if heap.peek().is_some_and(|worst| candidate < *worst) {
            heap.pop();
            heap.push(candidate);
        }
    }
    heap.into_sorted_vec()
        .into_iter()
        .map(|Kept(score, row)| (row, score))
        .collect()
}

impl Flat {
    /// `values` holds the rows one after another; a trailing partial row is dropped.
    pub fn new(dimension: usize, mut values: Vec<f32>) -> Flat {
        let rows = values.len().checked_div(dimension).unwrap_or(0);
        values.truncate(rows * dimension);
        let mut quantized = Vec::with_capacity(values.len());
        let mut scales = Vec::with_capacity(rows);
        if dimension > 0 {
            for row in values.chunks_exact(dimension) {
                let (rounded, scale) = scaled(row, 127.0);
                quantized.extend(rounded.map(|v| v as i8));
                scales.push(scale);
            }
        }
        Flat {
            dimension,
            values,
            quantized,
            scales,
        }
    }

    pub fn dimension(&self) -> usize {
        self.dimension
    }

    pub fn len(&self) -> usize {
        self.values.len().checked_div(self.dimension).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `row`'s values.
    pub fn row(&self, row: usize) -> &[f32] {
        &self.values[row * self.dimension..(row + 1) * self.dimension]
    }

    /// Every row's values, one after another.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// The best `k` rows by dot product with `query` among those `filter` keeps, best first,
    /// found by the `i8` scan and scored exactly (see the module's note); ties go to the
    /// earlier row.
    pub fn top_k(&self, query: &[f32], k: usize, filter: Option<RowFilter<'_>>) -> Ranked {
        if self.dimension == 0 || k == 0 {
            return Vec::new();
        }
        // The query is widened to `i16` as finely as the `i32` sums allow: |sum| ≤ 127 ×
        // limit × dimension stays below `i32::MAX` (limit 32,767 up to 516 dimensions).
        let limit = (i32::MAX as f32 / (127.0 * self.dimension as f32)).min(i16::MAX as f32);
        let (rounded, query_scale) = scaled(query, limit.floor());
        let wide: Vec<i16> = rounded.map(|v| v as i16).collect();
        let scored = self
            .quantized
            .chunks_exact(self.dimension)
            .zip(&self.scales)
            .enumerate()
            .filter(|(row, _)| kept(filter, *row))
            .map(|(row, (values, scale))| {
                (row, dot_i8(values, &wide) as f32 / (scale * query_scale))
            });
        let depth = (RESCORE_FACTOR * k).max(RESCORE_MIN);
        let candidates: Vec<usize> = best(scored, depth)
            .into_iter()
            .map(|(row, _)| row)
            .collect();
        self.rescore(query, &candidates, k)
    }

    /// The best `k` rows by an `f32` dot product with every row `filter` keeps: the reference
    /// [`Flat::top_k`] is measured against.
    pub fn top_k_f32(&self, query: &[f32], k: usize, filter: Option<RowFilter<'_>>) -> Ranked {
        if self.dimension == 0 {
            return Vec::new();
        }
        let scored = self
            .values
            .chunks_exact(self.dimension)
            .enumerate()
            .filter(|(row, _)| kept(filter, *row))
            .map(|(row, values)| (row, dot(values, query)));
        best(scored, k)
    }

    /// Like [`Flat::top_k`] over the listed rows only.
    pub fn rescore(&self, query: &[f32], rows: &[usize], k: usize) -> Ranked {
        best(rows.iter().map(|&row| (row, dot(self.row(row), query))), k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_ranks_by_score_then_row_and_applies_the_filter() {
        // Rows: 0 → 0.5, 1 → 1.0, 2 → 0.5, 3 → -1.0 against the query (1, 0).
        let flat = Flat::new(2, vec![0.5, 0.0, 1.0, 0.0, 0.5, 9.0, -1.0, 0.0]);
        assert_eq!(flat.len(), 4);
        let q = [1.0, 0.0];
        // Rows 0 and 1 in group 0, rows 2 and 3 in group 1.
        let groups = [0, 0, 1, 1];
        let second = Some(RowFilter {
            groups: &groups,
            allowed: &[false, true],
        });
        assert_eq!(flat.top_k(&q, 3, None), [(1, 1.0), (0, 0.5), (2, 0.5)]);
        assert_eq!(flat.top_k(&q, 2, second), [(2, 0.5), (3, -1.0)]);
        assert_eq!(flat.top_k(&q, 0, None), []);
        assert_eq!(flat.rescore(&q, &[3, 0], 1), [(0, 0.5)]);
        for k in [1, 3, 9] {
            assert_eq!(flat.top_k_f32(&q, k, None), flat.top_k(&q, k, None));
            assert_eq!(flat.top_k_f32(&q, k, second), flat.top_k(&q, k, second));
        }
        assert!(Flat::new(0, vec![1.0]).top_k(&q, 3, None).is_empty());
    }
}

#[cfg(test)]
mod recall {
    use super::*;

    /// A deterministic unit vector with no structure (the hardest case for the `i8` scan:
    /// scores crowd together).
    fn unit(state: &mut u64, dimension: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dimension)
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

    #[test]
    fn the_i8_scan_finds_what_the_f32_scan_finds() {
        let (rows, dimension) = (5_000, 384);
        let mut state = 7;
        let values: Vec<f32> = (0..rows)
            .flat_map(|_| unit(&mut state, dimension))
            .collect();
        let flat = Flat::new(dimension, values);
        let (mut found, mut wanted) = (0, 0);
        for _ in 0..50 {
            let q = unit(&mut state, dimension);
            let truth = flat.top_k_f32(&q, 10, None);
            let got = flat.top_k(&q, 10, None);
            found += got.iter().filter(|hit| truth.contains(hit)).count();
            wanted += truth.len();
        }
        assert_eq!(
            found, wanted,
            "recall@10 of the i8 scan: {found} of {wanted}"
        );
    }
}

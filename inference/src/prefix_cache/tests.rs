//! The prefix cache without the runtime: a KV source whose every float is a function of the
//! token ids up to its position (and of layer, key/value, head and index), so a hit holding
//! data stored for another prefix, or misplaced in the output, shows.

use super::*;
use proptest::prelude::*;

const SHAPE: KvShape = KvShape {
    layers: 2,
    heads: 2,
    head_dim: 3,
};

/// What a real model's KV would be: determined by the ids up to and including `pos`.
fn expected(prefix: &[u32], layer: usize, value: bool, head: usize, d: usize) -> f32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &t in prefix {
        h = (h ^ u64::from(t)).wrapping_mul(0x1000_0000_01b3);
    }
    for x in [layer, usize::from(value), head, d] {
        h = (h ^ x as u64).wrapping_mul(0x1000_0000_01b3);
    }
    (h % 1_000_003) as f32
}

/// A prefilled prompt's KV, as the engine would hand it over.
struct Source {
    data: Vec<f32>,
}

impl Source {
    fn new(prompt: &[u32]) -> Self {
        let mut data = Vec::new();
        for pos in 0..prompt.len() {
            for layer in 0..SHAPE.layers {
                for value in [false, true] {
                    for head in 0..SHAPE.heads {
                        for d in 0..SHAPE.head_dim {
                            data.push(expected(&prompt[..=pos], layer, value, head, d));
                        }
                    }
                }
            }
        }
        Source { data }
    }
}

impl KvSource for Source {
    fn slice(&self, layer: usize, value: bool, head: usize, pos: usize) -> &[f32] {
        let at = (((pos * SHAPE.layers + layer) * 2 + usize::from(value)) * SHAPE.heads + head)
            * SHAPE.head_dim;
        &self.data[at..at + SHAPE.head_dim]
    }
}

fn cache(capacity_tokens: usize, min_tokens: usize) -> PrefixCache {
    let probe = PrefixCache::new(0, 1, SHAPE, Arc::default());
    PrefixCache::new(
        capacity_tokens * probe.token_bytes(),
        min_tokens,
        SHAPE,
        Arc::default(),
    )
}

fn insert(cache: &mut PrefixCache, prompt: &[u32]) {
    cache.insert(prompt, &Source::new(prompt));
}

/// Every float of the hit is the one stored for that position of `prompt`.
fn assert_hit_exact(hit: &PrefixHit, prompt: &[u32]) {
    assert_eq!(hit.layers.len(), SHAPE.layers);
    for (layer, (keys, values)) in hit.layers.iter().enumerate() {
        for (value, data) in [(false, keys), (true, values)] {
            assert_eq!(data.len(), SHAPE.heads * hit.len * SHAPE.head_dim);
            for head in 0..SHAPE.heads {
                for pos in 0..hit.len {
                    for d in 0..SHAPE.head_dim {
                        let got = data[(head * hit.len + pos) * SHAPE.head_dim + d];
                        let want = expected(&prompt[..=pos], layer, value, head, d);
                        assert_eq!(
                            got, want,
                            "layer {layer} value {value} head {head} pos {pos} d {d}"
                        );
                    }
                }
            }
        }
    }
}

fn hit_len(cache: &mut PrefixCache, prompt: &[u32], max_len: usize) -> usize {
    match cache.lookup(prompt, max_len) {
        Some(hit) => {
            assert_hit_exact(&hit, prompt);
            hit.len
        }
        None => 0,
    }
}

#[test]
fn a_prompt_branching_inside_a_node_splits_it() {
    let mut c = cache(100, 1);
    insert(&mut c, &[1, 2, 3, 4, 5]);
    insert(&mut c, &[1, 2, 9, 9]);
    assert_eq!(c.stored_tokens(), 7);
    assert_eq!(hit_len(&mut c, &[1, 2, 3, 4, 5, 6], 6), 5);
    assert_eq!(hit_len(&mut c, &[1, 2, 9, 9, 7], 5), 4);
    assert_eq!(hit_len(&mut c, &[1, 2, 7], 3), 2);
    assert_eq!(c.bytes(), 7 * c.token_bytes());
}

#[test]
fn a_stored_prompt_inserted_again_adds_nothing() {
    let mut c = cache(100, 1);
    insert(&mut c, &[1, 2, 3, 4, 5]);
    let bytes = c.bytes();
    insert(&mut c, &[1, 2, 3, 4, 5]);
    insert(&mut c, &[1, 2, 3]);
    assert_eq!(c.bytes(), bytes);
    assert_eq!(c.stored_tokens(), 5);
    assert_eq!(c.stats().snapshot().inserted_tokens, 5);
}

#[test]
fn the_next_step_of_a_conversation_extends_its_leaf() {
    let mut c = cache(100, 1);
    insert(&mut c, &[1, 2, 3, 4, 5]);
    assert_eq!(hit_len(&mut c, &[1, 2, 3, 4, 5, 6, 7, 8], 6), 5);
    insert(&mut c, &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(c.stored_tokens(), 8);
    assert_eq!(hit_len(&mut c, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 8), 8);
}

#[test]
fn a_hit_may_end_inside_a_node_and_is_capped_at_max_len() {
    let mut c = cache(100, 1);
    insert(&mut c, &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(hit_len(&mut c, &[1, 2, 3, 7], 4), 3);
    assert_eq!(hit_len(&mut c, &[1, 2, 3, 4, 5, 6, 7, 8], 6), 6);
    assert_eq!(hit_len(&mut c, &[2, 3], 2), 0);
    let stats = c.stats().snapshot();
    assert_eq!((stats.hits, stats.misses, stats.hit_tokens), (2, 1, 9));
}

#[test]
fn hits_shorter_than_the_minimum_are_misses() {
    let mut c = cache(100, 4);
    insert(&mut c, &[1, 2, 3, 4, 5]);
    assert!(c.lookup(&[1, 2, 3, 9], 4).is_none());
    assert_eq!(hit_len(&mut c, &[1, 2, 3, 4, 9], 5), 4);
    assert_eq!(c.stats().snapshot().misses, 1);
}

#[test]
fn the_least_recently_used_prompt_is_evicted_first() {
    let mut c = cache(10, 1);
    insert(&mut c, &[1, 1, 1, 1]);
    insert(&mut c, &[2, 2, 2, 2]);
    // A lookup refreshes A: B is now the oldest.
    assert_eq!(hit_len(&mut c, &[1, 1, 1, 1, 5], 5), 4);
    insert(&mut c, &[3, 3, 3, 3]);
    assert_eq!(hit_len(&mut c, &[2, 2, 2, 2, 5], 5), 0);
    assert_eq!(hit_len(&mut c, &[1, 1, 1, 1, 5], 5), 4);
    assert_eq!(hit_len(&mut c, &[3, 3, 3, 3, 5], 5), 4);
    let stats = c.stats().snapshot();
    assert_eq!((stats.evictions, stats.evicted_tokens), (1, 4));
    assert!(c.bytes() <= c.capacity());
}

#[test]
fn the_prefix_being_extended_is_never_evicted_and_a_long_tail_is_cut() {
    let mut c = cache(10, 1);
    insert(&mut c, &[1, 2, 3, 4, 5, 6]);
    let long: Vec<u32> = (1..=12).collect();
    insert(&mut c, &long);
    assert_eq!(c.stored_tokens(), 10);
    assert_eq!(c.bytes(), c.capacity());
    assert_eq!(hit_len(&mut c, &long, 12), 10);
    assert_eq!(c.stats().snapshot().evictions, 0);
}

#[test]
fn a_prompt_longer_than_the_whole_cache_keeps_its_head() {
    let mut c = cache(5, 1);
    insert(&mut c, &[9, 8, 7, 6, 5, 4, 3, 2]);
    assert_eq!(c.stored_tokens(), 5);
    assert_eq!(hit_len(&mut c, &[9, 8, 7, 6, 5, 4, 3, 2], 8), 5);
    let mut off = cache(0, 1);
    insert(&mut off, &[1, 2, 3]);
    assert_eq!((off.bytes(), off.stored_tokens()), (0, 0));
}

#[test]
fn clear_forgets_everything() {
    let mut c = cache(100, 1);
    insert(&mut c, &[1, 2, 3]);
    insert(&mut c, &[1, 5, 6]);
    c.clear();
    assert_eq!((c.bytes(), c.stored_tokens()), (0, 0));
    assert_eq!(c.stats().snapshot().bytes, 0);
    insert(&mut c, &[1, 2, 3]);
    assert_eq!(hit_len(&mut c, &[1, 2, 3, 4], 4), 3);
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u32>),
    Lookup(Vec<u32>, usize),
}

fn prompt() -> impl Strategy<Value = Vec<u32>> {
    proptest::collection::vec(0u32..4, 0..24)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        prompt().prop_map(Op::Insert),
        (prompt(), 0usize..30).prop_map(|(p, m)| Op::Lookup(p, m)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Against a naive model (the list of inserted prompts): every hit returns exactly the KV
    /// stored for that prefix and is no longer than some inserted prompt's common prefix; a
    /// prompt that fits is fully stored right after its insert; and the cache's bytes are its
    /// stored tokens' and never exceed its budget.
    #[test]
    fn the_cache_is_exact_and_within_budget(
        capacity in 0usize..60,
        min_tokens in 1usize..4,
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut c = cache(capacity, min_tokens);
        let mut inserted: Vec<Vec<u32>> = Vec::new();
        for op in ops {
            match op {
                Op::Insert(p) => {
                    insert(&mut c, &p);
                    if p.len() <= capacity && p.len() >= min_tokens {
                        prop_assert_eq!(hit_len(&mut c, &p, p.len()), p.len());
                    }
                    inserted.push(p);
                }
                Op::Lookup(p, max_len) => {
                    let got = hit_len(&mut c, &p, max_len);
                    let best = inserted
                        .iter()
                        .map(|q| q.iter().zip(&p).take_while(|(a, b)| a == b).count())
                        .max()
                        .unwrap_or(0);
                    prop_assert!(got <= best.min(max_len));
                    prop_assert!(got == 0 || got >= min_tokens);
                }
            }
            prop_assert_eq!(c.bytes(), c.stored_tokens() * c.token_bytes());
            prop_assert!(c.bytes() <= c.capacity());
            prop_assert_eq!(c.stats().snapshot().bytes, c.bytes());
        }
    }
}

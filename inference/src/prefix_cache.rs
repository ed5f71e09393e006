//! The prefix (KV) cache: the attention keys and values of recently prefilled prompts, indexed
//! by their token ids in a radix tree, so a prompt that starts like an earlier one (an agent's
//! next step: the same system prompt, tools and history, plus a little more) prefills only the
//! tokens after the shared prefix.
//!
//! Exact by construction: the KV of position `i` depends only on tokens `0..=i`, and lookups
//! compare token ids. One cache serves all workers of a pool (one model, one precision); it
//! holds copies, never the buffers a running batch writes. Memory is bounded: every stored
//! token costs [`PrefixCache::token_bytes`], and least recently used leaves are evicted so the
//! total never exceeds the capacity. Pure Rust, no runtime types: the engine adapts its tensors
//! through [`KvSource`] and [`PrefixHit`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The KV geometry of one model: `layers` × (key, value) × `heads` × `head_dim` floats a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    pub layers: usize,
    pub heads: usize,
    pub head_dim: usize,
}

impl KvShape {
    /// Floats one token's keys and values take, all layers together.
    pub fn floats_per_token(&self) -> usize {
        self.layers * 2 * self.heads * self.head_dim
    }
}

/// Where the cache copies a prefilled prompt's KV from: `head_dim` floats for one position of
/// one head, of one layer's keys (`value = false`) or values.
pub trait KvSource {
    fn slice(&self, layer: usize, value: bool, head: usize, pos: usize) -> &[f32];
}

/// A cached prefix, copied out: per layer the keys and values of its `len` positions, each
/// `[heads, len, head_dim]` (the layout of a batch-1 `past_key_values` tensor).
#[derive(Debug, Clone, PartialEq)]
pub struct PrefixHit {
    pub len: usize,
    pub layers: Vec<(Vec<f32>, Vec<f32>)>,
}

/// Counters and gauges of one cache, readable without its lock.
#[derive(Debug, Default)]
pub struct PrefixStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Prompt tokens served from the cache (not prefilled).
    pub hit_tokens: AtomicU64,
    pub inserted_tokens: AtomicU64,
    /// Nodes (stored prompt pieces) evicted to make room.
    pub evictions: AtomicU64,
    pub evicted_tokens: AtomicU64,
    pub bytes: AtomicUsize,
    pub capacity: AtomicUsize,
}

/// A copy of [`PrefixStats`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct PrefixStatsSnapshot {
    pub hits: u64,
    pub misses: u64,
    pub hit_tokens: u64,
    pub inserted_tokens: u64,
    pub evictions: u64,
    pub evicted_tokens: u64,
    pub bytes: usize,
    pub capacity: usize,
}

impl PrefixStats {
    pub fn snapshot(&self) -> PrefixStatsSnapshot {
        PrefixStatsSnapshot {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            hit_tokens: self.hit_tokens.load(Ordering::Relaxed),
            inserted_tokens: self.inserted_tokens.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            evicted_tokens: self.evicted_tokens.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            capacity: self.capacity.load(Ordering::Relaxed),
        }
    }
}

const ROOT: usize = 0;

/// One edge of the tree: a run of tokens and their KV, token-major
/// (`[pos][layer][key|value][head][head_dim]`), so a node splits with one `split_off`.
#[derive(Debug, Default)]
struct Node {
    tokens: Vec<u32>,
    kv: Vec<f32>,
    /// By the first token of each child.
    children: HashMap<u32, usize>,
    parent: usize,
    last_used: u64,
    live: bool,
}

/// The radix tree of cached prompt prefixes (see the module docs).
pub struct PrefixCache {
    nodes: Vec<Node>,
    free: Vec<usize>,
    shape: KvShape,
    capacity: usize,
    bytes: usize,
    min_tokens: usize,
    clock: u64,
    stats: Arc<PrefixStats>,
}

impl PrefixCache {
    /// A cache of at most `capacity` bytes; hits shorter than `min_tokens` count as misses.
    pub fn new(
        capacity: usize,
        min_tokens: usize,
        shape: KvShape,
        stats: Arc<PrefixStats>,
    ) -> Self {
        stats.capacity.store(capacity, Ordering::Relaxed);
        stats.bytes.store(0, Ordering::Relaxed);
        let root = Node {
            live: true,
            ..Node::default()
        };
        PrefixCache {
            nodes: vec![root],
            free: Vec::new(),
            shape,
            capacity,
            bytes: 0,
            min_tokens: min_tokens.max(1),
            clock: 0,
            stats,
        }
    }

    /// What one stored token costs: its keys and values (f32) and its id.
    pub fn token_bytes(&self) -> usize {
        self.shape.floats_per_token() * std::mem::size_of::<f32>() + std::mem::size_of::<u32>()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn stats(&self) -> &Arc<PrefixStats> {
        &self.stats
    }

    /// Tokens stored in all nodes.
    pub fn stored_tokens(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.live)
            .map(|n| n.tokens.len())
            .sum()
    }

    /// The nodes on the longest stored path matching `prompt`, with how many of each node's
    /// tokens match, and the total matched.
    fn walk(&self, prompt: &[u32]) -> (Vec<(usize, usize)>, usize) {
        let mut path = Vec::new();
        let mut at = ROOT;
        let mut matched = 0;
        while matched < prompt.len() {
            let Some(&child) = self.nodes[at].children.get(&prompt[matched]) else {
                break;
            };
            let tokens = &self.nodes[child].tokens;
            let common = tokens
                .iter()
                .zip(&prompt[matched..])
                .take_while(|(a, b)| a == b)
                .count();
            path.push((child, common));
            matched += common;
            if common < tokens.len() {
                break;
            }
            at = child;
        }
        (path, matched)
    }

    /// Tokens of `prompt` the cache would serve, at most `max_len` (no copy, no counting).
    pub fn matched_len(&self, prompt: &[u32], max_len: usize) -> usize {
        let (_, matched) = self.walk(prompt);
        matched.min(max_len)
    }

    /// The longest cached prefix of `prompt`, at most `max_len` tokens, copied out; `None` (a
    /// miss) when it is shorter than the minimum.
    pub fn lookup(&mut self, prompt: &[u32], max_len: usize) -> Option<PrefixHit> {
        let (path, matched) = self.walk(prompt);
        let len = matched.min(max_len);
        if len < self.min_tokens {
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.clock += 1;
        let KvShape {
            layers,
            heads,
            head_dim,
        } = self.shape;
        let mut out: Vec<(Vec<f32>, Vec<f32>)> = (0..layers)
            .map(|_| {
                (
                    vec![0.0; heads * len * head_dim],
                    vec![0.0; heads * len * head_dim],
                )
            })
            .collect();
        let mut pos = 0;
        for &(index, used) in &path {
            let node = &mut self.nodes[index];
            node.last_used = self.clock;
            for local in 0..used.min(len - pos) {
                let token = &node.kv[local * self.shape.floats_per_token()..];
                for (layer, (keys, values)) in out.iter_mut().enumerate() {
                    for (value, dst) in [(0, &mut *keys), (1, &mut *values)] {
                        for head in 0..heads {
                            let from = ((layer * 2 + value) * heads + head) * head_dim;
                            let to = (head * len + pos + local) * head_dim;
                            dst[to..to + head_dim].copy_from_slice(&token[from..from + head_dim]);
                        }
                    }
                }
            }
            pos += used;
            if pos >= len {
                break;
            }
        }
        self.stats.hits.fetch_add(1, Ordering::Relaxed);
        self.stats
            .hit_tokens
            .fetch_add(len as u64, Ordering::Relaxed);
        Some(PrefixHit { len, layers: out })
    }

    /// Stores `prompt` (whose KV for every position `src` holds): the part already stored is
    /// only marked used, the rest is copied in, after evicting least recently used prompts to
    /// make room; a tail that still does not fit is left out (a shorter prefix is still exact).
    pub fn insert(&mut self, prompt: &[u32], src: &dyn KvSource) {
        self.clock += 1;
        let (path, matched) = self.walk(prompt);
        for &(index, _) in &path {
            self.nodes[index].last_used = self.clock;
        }
        if matched == prompt.len() {
            return;
        }
        // Only the last node of the path can match in part: the new tail branches off inside it.
        let at = match path.last() {
            Some(&(index, used)) => {
                if used < self.nodes[index].tokens.len() {
                    self.split(index, used);
                }
                index
            }
            None => ROOT,
        };
        let keep: Vec<usize> = std::iter::once(ROOT)
            .chain(path.iter().map(|&(index, _)| index))
            .collect();
        let token_bytes = self.token_bytes();
        let mut tail = prompt.len() - matched;
        while self.bytes + tail * token_bytes > self.capacity {
            if !self.evict_one(&keep) {
                break;
            }
        }
        tail = tail.min(self.capacity.saturating_sub(self.bytes) / token_bytes);
        if tail == 0 {
            self.publish();
            return;
        }
        let fpt = self.shape.floats_per_token();
        let mut kv = Vec::with_capacity(tail * fpt);
        for pos in matched..matched + tail {
            for layer in 0..self.shape.layers {
                for value in [false, true] {
                    for head in 0..self.shape.heads {
                        kv.extend_from_slice(
                            &src.slice(layer, value, head, pos)[..self.shape.head_dim],
                        );
                    }
                }
            }
        }
        let node = Node {
            tokens: prompt[matched..matched + tail].to_vec(),
            kv,
            children: HashMap::new(),
            parent: at,
            last_used: self.clock,
            live: true,
        };
        let index = self.place(node);
        self.nodes[at].children.insert(prompt[matched], index);
        self.bytes += tail * token_bytes;
        self.stats
            .inserted_tokens
            .fetch_add(tail as u64, Ordering::Relaxed);
        self.publish();
    }

    /// Puts a node in a free slot of the arena, or a new one; returns its index.
    fn place(&mut self, node: Node) -> usize {
        match self.free.pop() {
            Some(slot) => {
                self.nodes[slot] = node;
                slot
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    /// Splits node `index` after its first `at` tokens (0 < at < len): the rest becomes its
    /// only child, which takes over its children.
    fn split(&mut self, index: usize, at: usize) {
        let fpt = self.shape.floats_per_token();
        let node = &mut self.nodes[index];
        let tokens = node.tokens.split_off(at);
        let kv = node.kv.split_off(at * fpt);
        let children = std::mem::take(&mut node.children);
        let rest = Node {
            children,
            parent: index,
            last_used: node.last_used,
            live: true,
            tokens,
            kv,
        };
        let first = rest.tokens[0];
        let child = self.place(rest);
        let grandchildren: Vec<usize> = self.nodes[child].children.values().copied().collect();
        for grandchild in grandchildren {
            self.nodes[grandchild].parent = child;
        }
        self.nodes[index].children.insert(first, child);
    }

    /// Evicts the least recently used leaf not in `keep`; false when there is none.
    fn evict_one(&mut self, keep: &[usize]) -> bool {
        let victim = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| n.live && *i != ROOT && n.children.is_empty() && !keep.contains(i))
            .min_by_key(|(_, n)| n.last_used)
            .map(|(i, _)| i);
        let Some(victim) = victim else {
            return false;
        };
        let node = std::mem::take(&mut self.nodes[victim]);
        self.nodes[node.parent].children.remove(&node.tokens[0]);
        self.bytes -= node.tokens.len() * self.token_bytes();
        self.free.push(victim);
        self.stats.evictions.fetch_add(1, Ordering::Relaxed);
        self.stats
            .evicted_tokens
            .fetch_add(node.tokens.len() as u64, Ordering::Relaxed);
        true
    }

    /// Forgets everything (after an engine error, as a precaution).
    pub fn clear(&mut self) {
        self.nodes.truncate(1);
        self.nodes[ROOT].children.clear();
        self.free.clear();
        self.bytes = 0;
        self.publish();
    }

    fn publish(&self) {
        debug_assert!(self.bytes <= self.capacity);
        self.stats.bytes.store(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;

//! Picking the next token from logits: greedy, or temperature with top-k and top-p, from a
//! seeded generator so that a fixed seed reproduces a generation.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{Error, Result, SamplingParams};

/// How many of the most likely tokens top-p looks at before it falls back to the whole
/// vocabulary: selecting them is O(vocab), sorting only them is cheap.
const NUCLEUS_CANDIDATES: usize = 256;

pub struct Sampler {
    temperature: f32,
    top_p: f32,
    top_k: usize,
    rng: StdRng,
}

impl Sampler {
    pub fn new(params: &SamplingParams) -> Result<Self> {
        if !(params.temperature >= 0.0 && params.temperature.is_finite()) {
            return Err(Error::InvalidRequest(
                "temperature must be a finite number ≥ 0".into(),
            ));
        }
        if !(params.top_p > 0.0 && params.top_p <= 1.0) {
            return Err(Error::InvalidRequest("top_p must be in (0, 1]".into()));
        }
        let rng = match params.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        Ok(Sampler {
            temperature: params.temperature,
            top_p: params.top_p,
            top_k: params.top_k,
            rng,
        })
    }

    /// Temperatures this low are greedy in effect (and 1/t would overflow).
    pub fn is_greedy(&self) -> bool {
        self.temperature < 1e-5 || self.top_k == 1
    }

    /// Picks a token. Tokens whose logit is −∞ (masked by a grammar) are never picked.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.is_greedy() {
            return argmax(logits);
        }
        let inv_t = 1.0 / self.temperature;
        let mut candidates: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, &l)| (i as u32, l * inv_t))
            .collect();
        if candidates.is_empty() {
            return argmax(logits);
        }
        if self.top_k > 0 && self.top_k < candidates.len() {
            sort_prefix_desc(&mut candidates, self.top_k);
            candidates.truncate(self.top_k);
        }
        // Probabilities over what is left (max-subtracted for stability).
        let max = candidates
            .iter()
            .map(|c| c.1)
            .fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0;
        for c in candidates.iter_mut() {
            c.1 = (c.1 - max).exp();
            total += c.1;
        }
        candidates.iter_mut().for_each(|c| c.1 /= total);
        if self.top_p < 1.0 {
            let head = NUCLEUS_CANDIDATES.min(candidates.len());
            sort_prefix_desc(&mut candidates, head);
            let head_mass: f32 = candidates[..head].iter().map(|c| c.1).sum();
            if head_mass < self.top_p {
                let all = candidates.len();
                sort_prefix_desc(&mut candidates, all);
            }
            let mut mass = 0.0;
            let cut = candidates
                .iter()
                .position(|c| {
                    mass += c.1;
                    mass >= self.top_p
                })
                .map_or(candidates.len(), |i| i + 1);
            candidates.truncate(cut);
        }
        let mass: f32 = candidates.iter().map(|c| c.1).sum();
        let mut draw = self.rng.random::<f32>() * mass;
        for &(token, p) in &candidates {
            if draw < p {
                return token;
            }
            draw -= p;
        }
        candidates.last().map_or_else(|| argmax(logits), |c| c.0)
    }
}

/// Puts the `n` largest candidates first, in descending order (the rest unordered after them).
fn sort_prefix_desc(candidates: &mut [(u32, f32)], n: usize) {
    let by_desc = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1);
    if n == 0 {
        return;
    }
    if n < candidates.len() {
        candidates.select_nth_unstable_by(n - 1, by_desc);
    }
    candidates[..n].sort_unstable_by(by_desc);
}

pub fn argmax(logits: &[f32]) -> u32 {
    // The maximum in eight independent lanes (the compiler turns the comparisons into vector
    // instructions), then the first index that holds it: two streaming passes instead of one
    // loop with a branch per token (a 151,936-wide row is read each decode step). NaNs never
    // win; a row with no value above −∞ gives 0, as the plain loop did.
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = logits.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = if v > *lane { v } else { *lane };
        }
    }
    let best = tail
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    if best == f32::NEG_INFINITY {
        return 0;
    }
    logits.iter().position(|&v| v == best).unwrap_or(0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_p: f32, top_k: usize, seed: u64) -> SamplingParams {
        SamplingParams {
            temperature,
            top_p,
            top_k,
            seed: Some(seed),
            ..Default::default()
        }
    }

    #[test]
    fn greedy_takes_the_maximum() {
        let mut s = Sampler::new(&params(0.0, 1.0, 0, 1)).unwrap();
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9]), 1);
    }

    #[test]
    fn argmax_takes_the_first_maximum_and_skips_nan() {
        let plain = |l: &[f32]| {
            let (mut best, mut value) = (0, f32::NEG_INFINITY);
            for (i, &v) in l.iter().enumerate() {
                if v > value {
                    (best, value) = (i, v);
                }
            }
            best as u32
        };
        let mut rng = StdRng::seed_from_u64(3);
        for len in [1, 7, 8, 9, 31, 1000] {
            for _ in 0..50 {
                let mut l: Vec<f32> = (0..len)
                    .map(|_| (rng.random::<f32>() * 8.0).round())
                    .collect();
                if len > 3 {
                    l[1] = f32::NAN;
                    l[len - 1] = f32::NEG_INFINITY;
                }
                assert_eq!(argmax(&l), plain(&l), "{l:?}");
            }
        }
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
        assert_eq!(
            argmax(&[1.0, 5.0, 5.0, 2.0, 5.0, 1.0, 0.0, 5.0, 9.0, 9.0]),
            8
        );
    }

    #[test]
    fn masked_tokens_are_never_sampled() {
        let mut s = Sampler::new(&params(1.5, 1.0, 0, 7)).unwrap();
        let logits = [f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, 0.0];
        for _ in 0..200 {
            let t = s.sample(&logits);
            assert!(t == 1 || t == 3);
        }
    }

    #[test]
    fn top_k_and_top_p_bound_the_choice() {
        let logits: Vec<f32> = (0..1000).map(|i| i as f32 / 100.0).collect();
        let mut k = Sampler::new(&params(1.0, 1.0, 3, 3)).unwrap();
        for _ in 0..300 {
            assert!(k.sample(&logits) >= 997);
        }
        // One dominant token holds > 90% of the mass: top_p = 0.9 always picks it.
        let mut peaked = vec![0.0f32; 1000];
        peaked[42] = 20.0;
        let mut p = Sampler::new(&params(1.0, 0.9, 0, 4)).unwrap();
        for _ in 0..300 {
            assert_eq!(p.sample(&peaked), 42);
        }
    }

    #[test]
    fn a_seed_reproduces_the_sequence() {
        let logits: Vec<f32> = (0..500).map(|i| ((i * 37) % 11) as f32 / 3.0).collect();
        let run = |seed| {
            let mut s = Sampler::new(&params(0.8, 0.95, 40, seed)).unwrap();
            (0..50).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(9), run(9));
        assert_ne!(run(9), run(10));
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Sampler::new(&params(-1.0, 1.0, 0, 1)).is_err());
        assert!(Sampler::new(&params(1.0, 0.0, 0, 1)).is_err());
        assert!(Sampler::new(&params(f32::NAN, 1.0, 0, 1)).is_err());
    }
}

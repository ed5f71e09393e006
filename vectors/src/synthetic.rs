//! Deterministic synthetic embeddings for benchmarks and tests (embedding 100,000 real chunks
//! on two cores takes hours). `Uniform` draws every unit vector independently: no structure,
//! the worst case for a graph (every point is about as far from every other). `Structured`
//! is shaped like sentence embeddings, whose intrinsic dimension is far below their length:
//! each document has a topic in a 24-dimension subspace (mapped into the full dimension by one
//! fixed random matrix), and each of its chunks is that topic plus noise there and a little
//! noise in every dimension.

/// The structured corpus's subspace.
const LATENT: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Structured,
    Uniform,
}

/// Deterministic pseudo-random numbers (a 64-bit LCG).
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    }

    /// A standard normal sample (Box–Muller).
    fn gauss(&mut self) -> f32 {
        let (a, b) = (self.uniform(), self.uniform());
        (-2.0 * a.ln()).sqrt() * (std::f32::consts::TAU * b).cos()
    }
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

pub struct Corpus {
    kind: Kind,
    dimension: usize,
    rng: Rng,
    map: Vec<f32>,
    topics: Vec<Vec<f32>>,
}

impl Corpus {
    /// A corpus of `documents` topics of `dimension`-float vectors, from `seed`.
    pub fn new(kind: Kind, dimension: usize, documents: usize, seed: u64) -> Corpus {
        let mut rng = Rng(seed);
        let map = (0..dimension * LATENT).map(|_| rng.gauss()).collect();
        let topics = (0..documents)
            .map(|_| (0..LATENT).map(|_| rng.gauss()).collect())
            .collect();
        Corpus {
            kind,
            dimension,
            rng,
            map,
            topics,
        }
    }

    /// A unit vector: a chunk of `document` (or a query about it).
    pub fn vector(&mut self, document: usize) -> Vec<f32> {
        if self.kind == Kind::Uniform || self.topics.is_empty() {
            return unit(
                (0..self.dimension)
                    .map(|_| self.rng.uniform() - 0.5)
                    .collect(),
            );
        }
        let topic = &self.topics[document % self.topics.len()];
        let z: Vec<f32> = topic.iter().map(|t| t + 0.6 * self.rng.gauss()).collect();
        let v = (0..self.dimension)
            .map(|r| {
                let row = &self.map[r * LATENT..(r + 1) * LATENT];
                row.iter().zip(&z).map(|(m, z)| m * z).sum::<f32>() + 0.5 * self.rng.gauss()
            })
            .collect();
        unit(v)
    }
}

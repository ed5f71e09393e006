//! Dot products: two `f32` slices, or an `i8` row and an `i16` query. The kernel is chosen once, at the
//! first call, from what the CPU supports; all three sum in a different order than a plain
//! loop, so scores can differ from one in the last bits (never the ranking of clear winners).

use std::sync::OnceLock;

type Kernel = fn(&[f32], &[f32]) -> f32;
type KernelI8 = fn(&[i8], &[i16]) -> i32;

struct Chosen {
    f32: Kernel,
    i8: KernelI8,
    name: &'static str,
}

static KERNEL: OnceLock<Chosen> = OnceLock::new();

fn chosen() -> &'static Chosen {
    KERNEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
            {
                return Chosen {
                    f32: x86::dot512,
                    i8: x86::dot512_i8,
                    name: "avx512",
                };
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Chosen {
                    f32: x86::dot256,
                    i8: x86::dot256_i8,
                    name: "avx2",
                };
            }
        }
        Chosen {
            f32: portable,
            i8: portable_i8,
            name: "portable",
        }
    })
}

/// The dot product of `a` and `b` (the shorter length if they differ).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    (chosen().f32)(a, b)
}

/// The dot product of an `i8` row and a query widened to `i16` (the shorter length).
pub fn dot_i8(row: &[i8], query: &[i16]) -> i32 {
    (chosen().i8)(row, query)
}

/// The kernels [`dot`] and [`dot_i8`] use on this CPU: `avx512`, `avx2` or `portable`.
pub fn kernel() -> &'static str {
    chosen().name
}

fn portable_i8(row: &[i8], query: &[i16]) -> i32 {
    let n = row.len().min(query.len());
    let whole = n / 16 * 16;
    let mut sums = [0i32; 16];
    for (x, y) in row[..whole]
        .chunks_exact(16)
        .zip(query[..whole].chunks_exact(16))
    {
        for lane in 0..16 {
            sums[lane] += x[lane] as i32 * y[lane] as i32;
        }
    }
    let tail: i32 = row[whole..n]
        .iter()
        .zip(&query[whole..n])
        .map(|(x, y)| *x as i32 * *y as i32)
        .sum();
    sums.iter().sum::<i32>() + tail
}

/// Sixteen running sums, which the compiler vectorizes for whatever the target has.
fn portable(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let whole = n / 16 * 16;
    let mut sums = [0f32; 16];
    for (x, y) in a[..whole].chunks_exact(16).zip(b[..whole].chunks_exact(16)) {
        for lane in 0..16 {
            sums[lane] += x[lane] * y[lane];
        }
    }
    let tail: f32 = a[whole..n]
        .iter()
        .zip(&b[whole..n])
        .map(|(x, y)| x * y)
        .sum();
    sums.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    pub fn dot256(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: chosen only after `is_x86_feature_detected!` saw AVX2 and FMA.
        unsafe { avx2(a, b) }
    }

    pub fn dot512(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: chosen only after `is_x86_feature_detected!` saw AVX-512F.
        unsafe { avx512(a, b) }
    }

    pub fn dot256_i8(row: &[i8], query: &[i16]) -> i32 {
        // SAFETY: chosen only after `is_x86_feature_detected!` saw AVX2.
        unsafe { avx2_i8(row, query) }
    }

    pub fn dot512_i8(row: &[i8], query: &[i16]) -> i32 {
        // SAFETY: chosen only after `is_x86_feature_detected!` saw AVX-512F and BW.
        unsafe { avx512_i8(row, query) }
    }

    /// Sixteen `i8` widened to `i16`, multiplied pairwise with the query and summed in pairs
    /// into eight `i32` lanes (`vpmaddwd`): |127 × 32767 × 2| fits an `i32` many times over.
    #[target_feature(enable = "avx2")]
    unsafe fn avx2_i8(row: &[i8], query: &[i16]) -> i32 {
        let n = row.len().min(query.len());
        let (pr, pq) = (row.as_ptr(), query.as_ptr());
        let mut sum = _mm256_setzero_si256();
        let mut i = 0;
        // SAFETY (all loads): `i + 16 <= n`, within both slices.
        while i + 16 <= n {
            let wide = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(pr.add(i).cast()) });
            let q = unsafe { _mm256_loadu_si256(pq.add(i).cast()) };
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(wide, q));
            i += 16;
        }
        let mut lanes = [0i32; 8];
        // SAFETY: `lanes` holds eight `i32`.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), sum) };
        lanes.iter().sum::<i32>()
            + row[i..n]
                .iter()
                .zip(&query[i..n])
                .map(|(x, y)| *x as i32 * *y as i32)
                .sum::<i32>()
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn avx512_i8(row: &[i8], query: &[i16]) -> i32 {
        let n = row.len().min(query.len());
        let (pr, pq) = (row.as_ptr(), query.as_ptr());
        let mut sum = _mm512_setzero_si512();
        let mut i = 0;
        // SAFETY (all loads): `i + 32 <= n`, within both slices.
        while i + 32 <= n {
            let wide = _mm512_cvtepi8_epi16(unsafe { _mm256_loadu_si256(pr.add(i).cast()) });
            let q = unsafe { _mm512_loadu_si512(pq.add(i).cast()) };
            sum = _mm512_add_epi32(sum, _mm512_madd_epi16(wide, q));
            i += 32;
        }
        _mm512_reduce_add_epi32(sum)
            + row[i..n]
                .iter()
                .zip(&query[i..n])
                .map(|(x, y)| *x as i32 * *y as i32)
                .sum::<i32>()
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut sums = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (all loads): `i + 32 <= n`, within both slices.
        while i + 32 <= n {
            for (k, sum) in sums.iter_mut().enumerate() {
                let at = i + 8 * k;
                *sum = _mm256_fmadd_ps(
                    unsafe { _mm256_loadu_ps(pa.add(at)) },
                    unsafe { _mm256_loadu_ps(pb.add(at)) },
                    *sum,
                );
            }
            i += 32;
        }
        let total = _mm256_add_ps(
            _mm256_add_ps(sums[0], sums[1]),
            _mm256_add_ps(sums[2], sums[3]),
        );
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds eight floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), total) };
        lanes.iter().sum::<f32>()
            + a[i..n]
                .iter()
                .zip(&b[i..n])
                .map(|(x, y)| x * y)
                .sum::<f32>()
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn avx512(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut sums = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        // SAFETY (all loads): `i + 32 <= n`, within both slices.
        while i + 32 <= n {
            for (k, sum) in sums.iter_mut().enumerate() {
                let at = i + 16 * k;
                *sum = _mm512_fmadd_ps(
                    unsafe { _mm512_loadu_ps(pa.add(at)) },
                    unsafe { _mm512_loadu_ps(pb.add(at)) },
                    *sum,
                );
            }
            i += 32;
        }
        _mm512_reduce_add_ps(_mm512_add_ps(sums[0], sums[1]))
            + a[i..n]
                .iter()
                .zip(&b[i..n])
                .map(|(x, y)| x * y)
                .sum::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
    }

    #[test]
    fn every_kernel_agrees_with_a_plain_sum_at_awkward_lengths() {
        let mut kernels: Vec<Kernel> = vec![portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                kernels.push(x86::dot256);
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                kernels.push(x86::dot512);
            }
        }
        let mut i8_kernels: Vec<KernelI8> = vec![portable_i8];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                i8_kernels.push(x86::dot256_i8);
            }
            if std::arch::is_x86_feature_detected!("avx512bw") {
                i8_kernels.push(x86::dot512_i8);
            }
        }
        for n in [0, 1, 7, 16, 31, 32, 33, 100, 384, 385] {
            let a: Vec<f32> = (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) / 7.0).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 13 % 17) as f32 - 8.0) / 9.0).collect();
            let want = plain(&a, &b);
            for kernel in &kernels {
                let got = kernel(&a, &b) as f64;
                assert!((got - want).abs() < 1e-4, "n {n}: {got} against {want}");
            }
            let r: Vec<i8> = (0..n).map(|i| (i * 37 % 255 - 127) as i8).collect();
            let q: Vec<i16> = (0..n).map(|i| ((i * 13 % 255) as i16 - 127) * 3).collect();
            let want: i32 = r.iter().zip(&q).map(|(x, y)| *x as i32 * *y as i32).sum();
            for kernel in &i8_kernels {
                assert_eq!(kernel(&r, &q), want, "n {n}");
            }
        }
        assert!(["avx512", "avx2", "portable"].contains(&kernel()));
    }
}

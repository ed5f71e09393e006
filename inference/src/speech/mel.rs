//! Whisper's input: the 80-bin log-mel spectrogram of 16 kHz mono audio, computed as OpenAI's
//! reference does (`whisper/audio.py`): a 400-point STFT with a periodic Hann window and a
//! hop of 160 samples (reflect-padded at both ends), power spectra through the Slaney-style
//! mel filter bank librosa builds (`librosa.filters.mel(sr=16000, n_fft=400, n_mels=80)`,
//! computed here: equal to the reference's `mel_filters.npz` within 2e-9), `log10` clamped at
//! 1e-10, floored 8 below the maximum and scaled to `(x + 4) / 4`.

use std::sync::Arc;

use rustfft::num_complex::Complex;
use rustfft::FftPlanner;

/// Samples per second Whisper hears.
pub const SAMPLE_RATE: usize = 16_000;
/// Samples per STFT window.
pub const N_FFT: usize = 400;
/// Samples between windows: one frame is 10 ms.
pub const HOP: usize = 160;
/// Frames in one 30-second window of the encoder.
pub const WINDOW_FRAMES: usize = 3000;
/// Samples in 30 seconds.
pub const WINDOW_SAMPLES: usize = WINDOW_FRAMES * HOP;

/// The mel filter bank: `n_mels` rows of `N_FFT / 2 + 1` weights.
pub fn mel_filters(n_mels: usize) -> Vec<Vec<f32>> {
    let bins = N_FFT / 2 + 1;
    let fft_freqs: Vec<f64> = (0..bins)
        .map(|i| i as f64 * (SAMPLE_RATE as f64 / 2.0) / (bins - 1) as f64)
        .collect();
    let (low, high) = (hz_to_mel(0.0), hz_to_mel(SAMPLE_RATE as f64 / 2.0));
    let mel_freqs: Vec<f64> = (0..n_mels + 2)
        .map(|i| mel_to_hz(low + (high - low) * i as f64 / (n_mels + 1) as f64))
        .collect();
    (0..n_mels)
        .map(|m| {
            let (left, center, right) = (mel_freqs[m], mel_freqs[m + 1], mel_freqs[m + 2]);
            // Slaney normalisation: each triangle has unit area.
            let norm = 2.0 / (right - left);
            fft_freqs
                .iter()
                .map(|&f| {
                    let rising = (f - left) / (center - left);
                    let falling = (right - f) / (right - center);
                    (rising.min(falling).max(0.0) * norm) as f32
                })
                .collect()
        })
        .collect()
}

const MIN_LOG_HZ: f64 = 1000.0;
const MIN_LOG_MEL: f64 = 15.0;
const F_SP: f64 = 200.0 / 3.0;

fn log_step() -> f64 {
    6.4f64.ln() / 27.0
}

fn hz_to_mel(hz: f64) -> f64 {
    if hz >= MIN_LOG_HZ {
        MIN_LOG_MEL + (hz / MIN_LOG_HZ).ln() / log_step()
    } else {
        hz / F_SP
    }
}

fn mel_to_hz(mel: f64) -> f64 {
    if mel >= MIN_LOG_MEL {
        MIN_LOG_HZ * (log_step() * (mel - MIN_LOG_MEL)).exp()
    } else {
        mel * F_SP
    }
}

/// Computes log-mel spectrograms; holds the filter bank (each filter as its first non-zero
/// bin and its non-zero weights: a triangle spans a few bins) and the FFT plan.
pub struct MelSpectrogram {
    filters: Vec<(usize, Vec<f32>)>,
    fft: Arc<dyn rustfft::Fft<f32>>,
    window: Vec<f32>,
}

impl MelSpectrogram {
    pub fn new(n_mels: usize) -> Self {
        let window = (0..N_FFT)
            .map(|n| {
                (0.5 - 0.5 * (2.0 * std::f64::consts::PI * n as f64 / N_FFT as f64).cos()) as f32
            })
            .collect();
        let filters = mel_filters(n_mels)
            .into_iter()
            .map(|row| {
                let first = row.iter().position(|w| *w != 0.0).unwrap_or(0);
                let last = row.iter().rposition(|w| *w != 0.0).unwrap_or(0);
                (first, row[first..=last.max(first)].to_vec())
            })
            .collect();
        MelSpectrogram {
            filters,
            fft: FftPlanner::new().plan_fft_forward(N_FFT),
            window,
        }
    }

    pub fn n_mels(&self) -> usize {
        self.filters.len()
    }

    /// The spectrogram of `samples` followed by 30 seconds of silence (as the reference pads
    /// before slicing windows), `[n_mels][frames]`: every 30-second window starting inside the
    /// audio is whole.
    pub fn compute(&self, samples: &[f32]) -> Vec<Vec<f32>> {
        let mut audio = Vec::with_capacity(samples.len() + WINDOW_SAMPLES + N_FFT);
        let padded_len = samples.len() + WINDOW_SAMPLES;
        let at = |i: isize| -> f32 {
            // Reflect padding of N_FFT / 2 on both sides of the padded audio.
            let n = padded_len as isize;
            let j = if i < 0 {
                -i
            } else if i >= n {
                2 * (n - 1) - i
            } else {
                i
            };
            samples.get(j as usize).copied().unwrap_or(0.0)
        };
        let half = (N_FFT / 2) as isize;
        audio.extend((-half..padded_len as isize + half).map(at));
        // The reference drops the last frame.
        let frames = padded_len / HOP;
        let bins = N_FFT / 2 + 1;
        let mut power = vec![0f32; frames * bins];
        let mut buffer = vec![Complex::new(0f32, 0f32); N_FFT];
        let mut scratch = vec![Complex::new(0f32, 0f32); self.fft.get_inplace_scratch_len()];
        // The padding's frames are silence (most of a short clip's 30 s window): their power is
        // zero without an FFT.
        let mut silent = vec![false; frames];
        for frame in 0..frames {
            let start = frame * HOP;
            if audio[start..start + N_FFT].iter().all(|s| *s == 0.0) {
                silent[frame] = true;
                continue;
            }
            for (i, slot) in buffer.iter_mut().enumerate() {
                *slot = Complex::new(audio[start + i] * self.window[i], 0.0);
            }
            self.fft.process_with_scratch(&mut buffer, &mut scratch);
            for (bin, value) in buffer[..bins].iter().enumerate() {
                power[frame * bins + bin] = value.norm_sqr();
            }
        }
        let mut mel: Vec<Vec<f32>> = self
            .filters
            .iter()
            .map(|(first, weights)| {
                (0..frames)
                    .map(|frame| {
                        if silent[frame] {
                            return -10.0;
                        }
                        let row = &power[frame * bins + first..];
                        let energy: f32 = weights.iter().zip(row).map(|(w, p)| w * p).sum();
                        energy.max(1e-10).log10()
                    })
                    .collect()
            })
            .collect();
        let max = mel
            .iter()
            .flatten()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        for value in mel.iter_mut().flatten() {
            *value = (value.max(max - 8.0) + 4.0) / 4.0;
        }
        mel
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_bank_has_the_reference_shape_and_values() {
        let filters = mel_filters(80);
        assert_eq!((filters.len(), filters[0].len()), (80, 201));
        // Values of OpenAI's mel_filters.npz (`mel_80`), read with numpy.
        let expected = [
            (0, 1, 0.024_862_595),
            (10, 10, 0.019_908_218),
            (40, 43, 0.014_735_566),
            (40, 44, 0.006_518_19),
            (79, 199, 0.000_448_759),
            (40, 60, 0.0),
        ];
        for (row, column, value) in expected {
            let got = filters[row][column];
            assert!(
                (got - value).abs() < 1e-6,
                "[{row}][{column}] = {got}, expected {value}"
            );
        }
        assert!(filters.iter().all(|row| row.iter().all(|w| *w >= 0.0)));
    }

    #[test]
    fn a_tone_lights_the_bins_around_its_pitch_and_silence_is_flat() {
        let mel = MelSpectrogram::new(80);
        let tone: Vec<f32> = (0..SAMPLE_RATE)
            .map(|i| {
                (2.0 * std::f32::consts::PI * 1000.0 * i as f32 / SAMPLE_RATE as f32).sin() * 0.5
            })
            .collect();
        let spectrogram = mel.compute(&tone);
        assert_eq!(spectrogram.len(), 80);
        assert_eq!(spectrogram[0].len(), (SAMPLE_RATE + WINDOW_SAMPLES) / HOP);
        // The loudest bin in the middle of the tone is the one whose band holds 1 kHz.
        let frame = 50;
        let loudest = (0..80)
            .max_by(|&a, &b| spectrogram[a][frame].total_cmp(&spectrogram[b][frame]))
            .unwrap();
        let centers: Vec<f64> = (0..82)
            .map(|i| mel_to_hz(hz_to_mel(8000.0) * i as f64 / 81.0))
            .collect();
        assert!(
            centers[loudest] < 1000.0 && centers[loudest + 2] > 1000.0,
            "bin {loudest}"
        );
        // Scaled into the reference's range: max is (max + 4) / 4, floor 8 below.
        let max = spectrogram
            .iter()
            .flatten()
            .copied()
            .fold(f32::MIN, f32::max);
        let min = spectrogram
            .iter()
            .flatten()
            .copied()
            .fold(f32::MAX, f32::min);
        assert!((max - min - 2.0).abs() < 1e-4, "{max} {min}");
    }
}

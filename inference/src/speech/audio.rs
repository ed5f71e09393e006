//! Audio files as Whisper hears them: 16 kHz mono samples. WAV (PCM, ADPCM), MP3, FLAC,
//! Ogg (Vorbis, Opus) and WebM/Matroska (Vorbis, Opus) are read with `symphonia` (pure Rust);
//! Opus, which symphonia does not decode itself, with `opus-decoder` (pure Rust, RFC 8251),
//! straight at 16 kHz. Channels are averaged; other rates are resampled with a windowed-sinc
//! low-pass filter.

use symphonia::core::codecs::audio::well_known::CODEC_ID_OPUS;
use symphonia::core::codecs::audio::AudioDecoderOptions;
use symphonia::core::codecs::CodecParameters;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::{FormatOptions, TrackType};
use symphonia::core::io::{MediaSourceStream, MediaSourceStreamOptions};
use symphonia::core::meta::MetadataOptions;

use super::mel::SAMPLE_RATE;

/// Why a file could not be heard.
#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    /// Not an audio format (or codec) this reads.
    #[error("{0}")]
    Unsupported(String),
    /// A damaged file.
    #[error("the audio cannot be decoded: {0}")]
    Invalid(String),
    /// Longer than allowed.
    #[error("the audio is {seconds:.0} s long; at most {max} s are transcribed")]
    TooLong { seconds: f64, max: u64 },
}

/// Decodes `bytes` (any supported container) to 16 kHz mono samples in [-1, 1]; stops with
/// [`AudioError::TooLong`] past `max_seconds`. `mime` is a hint for the container.
pub fn decode(
    bytes: Vec<u8>,
    mime: Option<&str>,
    max_seconds: u64,
) -> Result<Vec<f32>, AudioError> {
    let source = MediaSourceStream::new(
        Box::new(std::io::Cursor::new(bytes)),
        MediaSourceStreamOptions::default(),
    );
    let mut hint = Hint::new();
    if let Some(mime) = mime {
        hint.mime_type(mime);
    }
    let mut format = symphonia::default::get_probe()
        .probe(
            &hint,
            source,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .map_err(|e| {
            AudioError::Unsupported(format!(
                "not an audio file this server reads (WAV, MP3, FLAC, Ogg, WebM): {e}"
            ))
        })?;
    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(|| AudioError::Unsupported("the file has no audio track".into()))?;
    let track_id = track.id;
    let Some(CodecParameters::Audio(params)) = track.codec_params.clone() else {
        return Err(AudioError::Unsupported(
            "the audio track's codec is not known".into(),
        ));
    };
    let channels = params.channels.as_ref().map_or(1, |c| c.count()).max(1);
    let mut decoder = Decoder::new(&params, channels)?;
    let rate = decoder.rate();
    let max_samples = max_seconds as usize * rate as usize;
    let mut mono = Vec::new();
    let mut interleaved = Vec::new();
    loop {
        let packet = match format.next_packet() {
            Ok(Some(packet)) => packet,
            Ok(None) => break,
            Err(symphonia::core::errors::Error::IoError(e))
                if e.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                break
            }
            Err(e) => return Err(AudioError::Invalid(e.to_string())),
        };
        if packet.track_id != track_id {
            continue;
        }
        interleaved.clear();
        let channels = decoder.decode(&packet, &mut interleaved)?;
        mono.extend(
            interleaved
                .chunks(channels)
                .map(|frame| frame.iter().sum::<f32>() / channels as f32),
        );
        if mono.len() > max_samples {
            return Err(AudioError::TooLong {
                seconds: mono.len() as f64 / f64::from(rate),
                max: max_seconds,
            });
        }
    }
    if mono.is_empty() {
        return Err(AudioError::Invalid(
            "the audio track holds no samples".into(),
        ));
    }
    Ok(resample(&mono, rate as usize, SAMPLE_RATE))
}

/// A track's decoder: symphonia's for its own codecs, `opus-decoder` for Opus.
enum Decoder {
    Symphonia(Box<dyn symphonia::core::codecs::audio::AudioDecoder>, u32),
    Opus(Box<opus_decoder::OpusDecoder>, Vec<f32>, usize),
}

impl Decoder {
    fn new(
        params: &symphonia::core::codecs::audio::AudioCodecParameters,
        channels: usize,
    ) -> Result<Self, AudioError> {
        if params.codec == CODEC_ID_OPUS {
            // Decoded at 16 kHz: what Whisper hears, and a rate Opus decodes to natively.
            let channels = channels.min(2);
            let decoder = opus_decoder::OpusDecoder::new(SAMPLE_RATE as u32, channels)
                .map_err(|e| AudioError::Invalid(format!("Opus: {e}")))?;
            // The longest Opus packet: 120 ms.
            let buffer = vec![0f32; SAMPLE_RATE * 120 / 1000 * channels];
            return Ok(Decoder::Opus(Box::new(decoder), buffer, channels));
        }
        let rate = params
            .sample_rate
            .ok_or_else(|| AudioError::Invalid("the track has no sample rate".into()))?;
        let decoder = symphonia::default::get_codecs()
            .make_audio_decoder(params, &AudioDecoderOptions::default())
            .map_err(|e| {
                AudioError::Unsupported(format!(
                    "the audio codec is not one this server decodes: {e}"
                ))
            })?;
        Ok(Decoder::Symphonia(decoder, rate))
    }

    fn rate(&self) -> u32 {
        match self {
            Decoder::Symphonia(_, rate) => *rate,
            Decoder::Opus(..) => SAMPLE_RATE as u32,
        }
    }

    /// Decodes one packet into `out` (interleaved); returns its channel count.
    fn decode(
        &mut self,
        packet: &symphonia::core::packet::Packet,
        out: &mut Vec<f32>,
    ) -> Result<usize, AudioError> {
        match self {
            Decoder::Symphonia(decoder, _) => {
                let buffer = match decoder.decode(packet) {
                    Ok(buffer) => buffer,
                    // A damaged packet is skipped, as players do.
                    Err(symphonia::core::errors::Error::DecodeError(_)) => return Ok(1),
                    Err(e) => return Err(AudioError::Invalid(e.to_string())),
                };
                buffer.copy_to_vec_interleaved(out);
                Ok(buffer.spec().channels().count().max(1))
            }
            Decoder::Opus(decoder, buffer, channels) => {
                let frames = decoder
                    .decode_float(&packet.data, buffer, false)
                    .map_err(|e| AudioError::Invalid(format!("Opus: {e}")))?;
                out.extend_from_slice(&buffer[..frames * *channels]);
                Ok(*channels)
            }
        }
    }
}

/// Half the taps of the resampling filter on each side.
const TAPS: isize = 16;

/// `samples` at `from` Hz as `to` Hz: a windowed-sinc (Blackman) interpolator whose cut-off
/// sits just under the lower Nyquist frequency, so nothing above it folds back as noise.
pub fn resample(samples: &[f32], from: usize, to: usize) -> Vec<f32> {
    if from == to || samples.is_empty() {
        return samples.to_vec();
    }
    let ratio = from as f64 / to as f64;
    let cutoff = 0.95 * (to as f64 / from as f64).min(1.0);
    let len = (samples.len() as f64 / ratio).floor() as usize;
    let width = TAPS as f64 / cutoff.min(1.0);
    (0..len)
        .map(|i| {
            let t = i as f64 * ratio;
            let center = t.floor() as isize;
            let reach = width.ceil() as isize;
            let mut sum = 0f64;
            let mut weights = 0f64;
            for n in center - reach..=center + reach {
                let x = t - n as f64;
                if x.abs() >= width {
                    continue;
                }
                let arg = std::f64::consts::PI * x * cutoff;
                let sinc = if arg.abs() < 1e-9 {
                    1.0
                } else {
                    arg.sin() / arg
                };
                let phase = std::f64::consts::PI * (x / width + 1.0);
                let window = 0.42 - 0.5 * phase.cos() + 0.08 * (2.0 * phase).cos();
                let w = sinc * window;
                weights += w;
                if let Some(&s) = usize::try_from(n).ok().and_then(|n| samples.get(n)) {
                    sum += f64::from(s) * w;
                }
            }
            (sum / weights.max(1e-9)) as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 16-bit PCM WAV file of `samples` at `rate` Hz with `channels` channels.
    pub fn wav(samples: &[f32], rate: u32, channels: u16) -> Vec<u8> {
        let data: Vec<u8> = samples
            .iter()
            .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32767.0) as i16).to_le_bytes())
            .collect();
        let mut out = Vec::new();
        out.extend_from_slice(b"RIFF");
        out.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
        out.extend_from_slice(b"WAVEfmt ");
        out.extend_from_slice(&16u32.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&channels.to_le_bytes());
        out.extend_from_slice(&rate.to_le_bytes());
        out.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
        out.extend_from_slice(&(channels * 2).to_le_bytes());
        out.extend_from_slice(&16u16.to_le_bytes());
        out.extend_from_slice(b"data");
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&data);
        out
    }

    fn tone(hz: f32, rate: usize, seconds: f32) -> Vec<f32> {
        (0..(rate as f32 * seconds) as usize)
            .map(|i| (2.0 * std::f32::consts::PI * hz * i as f32 / rate as f32).sin() * 0.5)
            .collect()
    }

    fn rms(samples: &[f32]) -> f32 {
        (samples.iter().map(|s| s * s).sum::<f32>() / samples.len() as f32).sqrt()
    }

    #[test]
    fn a_stereo_44k_wav_becomes_16k_mono_and_keeps_its_tone() {
        let left = tone(440.0, 44_100, 1.0);
        let stereo: Vec<f32> = left.iter().flat_map(|s| [*s, *s]).collect();
        let samples = decode(wav(&stereo, 44_100, 2), Some("audio/wav"), 60).unwrap();
        assert!(
            (samples.len() as i64 - 16_000).abs() <= 1,
            "{}",
            samples.len()
        );
        // A 0.5 sine has an RMS of 0.354; the resampler keeps it (edges aside).
        let middle = &samples[1000..15_000];
        assert!((rms(middle) - 0.3535).abs() < 0.01, "{}", rms(middle));
    }

    #[test]
    fn resampling_removes_what_the_lower_rate_cannot_hold() {
        // 7 kHz survives 48 → 16 kHz; 10 kHz would fold back to 6 kHz and is filtered out.
        let kept = resample(&tone(7_000.0, 48_000, 0.5), 48_000, 16_000);
        let folded = resample(&tone(10_000.0, 48_000, 0.5), 48_000, 16_000);
        assert!(rms(&kept[500..7500]) > 0.3, "{}", rms(&kept[500..7500]));
        assert!(
            rms(&folded[500..7500]) < 0.02,
            "{}",
            rms(&folded[500..7500])
        );
    }

    #[test]
    fn what_is_not_audio_or_too_long_is_refused_clearly() {
        let text = decode(b"hello, this is text".to_vec(), None, 60).unwrap_err();
        assert!(matches!(text, AudioError::Unsupported(_)), "{text}");
        let long = decode(wav(&tone(440.0, 16_000, 3.0), 16_000, 1), None, 2).unwrap_err();
        assert!(matches!(long, AudioError::TooLong { max: 2, .. }), "{long}");
    }
}

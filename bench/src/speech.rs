//! `stead bench speech` (docs/benchmarks.md, docs/speech.md): the local Whisper tiny.en beside
//! whisper.cpp on the same weights and the same samples — five labelled LibriVox sentences
//! (tests/fixtures/speech, built into the binary), decoded once by Stead's audio decoder and
//! given to both as 16 kHz float samples. For each: the best of `--runs` wall times of one whole
//! transcription (mel, encoder, greedy decoding), the real-time factor (seconds of compute per
//! second of audio) and the word error rate against the labels. The peer runs in its own
//! virtual environment (`pywhispercpp` from PyPI; its ggml model is written from the same
//! CTranslate2 export `stead setup` converts), on as many threads.

use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};
use stead_config::Config;
use stead_inference::setup;
use stead_inference::speech::wer::{word_errors, words};
use stead_inference::speech::{audio, Whisper, DEFAULT_SPEECH_MODEL};

use crate::cli::SpeechBenchArgs;

/// The labelled clips: (name, FLAC bytes, reference transcript).
const CLIPS: [(&str, &[u8], &str); 5] = [
    (
        "librivox-0870",
        include_bytes!("../../tests/fixtures/speech/librivox-0870.flac"),
        include_str!("../../tests/fixtures/speech/librivox-0870.txt"),
    ),
    (
        "librivox-0880",
        include_bytes!("../../tests/fixtures/speech/librivox-0880.flac"),
        include_str!("../../tests/fixtures/speech/librivox-0880.txt"),
    ),
    (
        "librivox-0890",
        include_bytes!("../../tests/fixtures/speech/librivox-0890.flac"),
        include_str!("../../tests/fixtures/speech/librivox-0890.txt"),
    ),
    (
        "librivox-0920",
        include_bytes!("../../tests/fixtures/speech/librivox-0920.flac"),
        include_str!("../../tests/fixtures/speech/librivox-0920.txt"),
    ),
    (
        "librivox-0930",
        include_bytes!("../../tests/fixtures/speech/librivox-0930.flac"),
        include_str!("../../tests/fixtures/speech/librivox-0930.txt"),
    ),
];

/// The peer's virtual environment (Python 3.11), installed `--no-deps`.
const PEER_REQUIREMENTS: &str = "pywhispercpp==1.5.1\nnumpy==2.4.6\nrequests==2.34.2\ntqdm==4.70.1\nplatformdirs==4.14.9\nurllib3==2.8.0\nidna==3.21\ncertifi==2026.10.19.post1\ncharset-normalizer==3.5.3\n";
const PEER_SCRIPT: &str = include_str!("../../inference/setup/peer_whisper.py");

struct Clip {
    name: &'static str,
    samples: Vec<f32>,
    reference: Vec<String>,
}

/// One engine's figures over the clips.
#[derive(Default)]
struct Figures {
    seconds: Vec<f64>,
    texts: Vec<String>,
}

impl Figures {
    fn rtf(&self, audio: f64) -> f64 {
        self.seconds.iter().sum::<f64>() / audio
    }

    fn wer(&self, clips: &[Clip]) -> f64 {
        let (errors, total) = clips
            .iter()
            .zip(&self.texts)
            .fold((0, 0), |(e, t), (clip, text)| {
                (
                    e + word_errors(&clip.reference, &words(text)),
                    t + clip.reference.len(),
                )
            });
        errors as f64 / total.max(1) as f64
    }
}

pub async fn speech(config: Config, args: SpeechBenchArgs) -> anyhow::Result<()> {
    let data = config.server.data_dir.clone();
    let model_dir = setup::model_dir(&data, DEFAULT_SPEECH_MODEL);
    anyhow::ensure!(
        model_dir.join("encoder.onnx").is_file(),
        "{} is not prepared: run `stead setup`",
        model_dir.display()
    );
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let clips: Vec<Clip> = CLIPS
        .iter()
        .map(|(name, flac, text)| {
            Ok(Clip {
                name,
                samples: audio::decode(flac.to_vec(), Some("audio/flac"), 60)?,
                reference: words(text),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let audio_seconds: f64 = clips
        .iter()
        .map(|c| c.samples.len() as f64 / 16_000.0)
        .sum();
    eprintln!(
        "{} clips, {audio_seconds:.1} s of speech, {threads} threads, best of {} runs",
        clips.len(),
        args.runs
    );

    let runs = args.runs.max(1);
    let (stead, clips) = tokio::task::spawn_blocking({
        let data = data.clone();
        move || -> anyhow::Result<(Figures, Vec<Clip>)> {
            let env = stead_inference::engine::init_runtime(&setup::runtime_library(&data))?;
            let mut model = Whisper::load(&env, &model_dir, threads)?;
            // One transcription first: ONNX Runtime's first run allocates.
            model.transcribe(&clips[0].samples)?;
            let mut figures = Figures::default();
            for clip in &clips {
                let mut best = f64::MAX;
                let mut text = String::new();
                for _ in 0..runs {
                    let started = Instant::now();
                    text = model.transcribe(&clip.samples)?.text;
                    best = best.min(started.elapsed().as_secs_f64());
                }
                eprintln!("  stead {}: {best:.3} s", clip.name);
                figures.seconds.push(best);
                figures.texts.push(text);
            }
            Ok((figures, clips))
        }
    })
    .await??;

    let peer = if args.no_peer {
        None
    } else {
        Some(run_peer(&data, &clips, threads, runs)?)
    };
    let report = json!({
        "threads": threads,
        "runs": runs,
        "audio_seconds": audio_seconds,
        "stead": {
            "rtf": stead.rtf(audio_seconds),
            "wer": stead.wer(&clips),
            "seconds": stead.seconds,
            "texts": stead.texts,
        },
        "peer": peer.as_ref().map(|(figures, name)| json!({
            "name": name,
            "rtf": figures.rtf(audio_seconds),
            "wer": figures.wer(&clips),
            "seconds": figures.seconds,
            "texts": figures.texts,
        })),
    });
    if args.json {
        println!("{report}");
        return Ok(());
    }
    println!("speech to text, Whisper tiny.en, {} clips ({audio_seconds:.1} s), {threads} threads, best of {runs}", clips.len());
    println!(
        "  {:<16} {:>7} {:>10} {:>7}",
        "", "RTF", "× real time", "WER"
    );
    let row = |name: &str, f: &Figures| {
        let rtf = f.rtf(audio_seconds);
        println!(
            "  {name:<16} {rtf:>7.3} {:>10.1} {:>6.1}%",
            1.0 / rtf,
            f.wer(&clips) * 100.0
        );
    };
    row("stead (ONNX)", &stead);
    if let Some((figures, name)) = &peer {
        row("whisper.cpp", figures);
        println!(
            "  speed: stead {:.2}× the peer's ({name})",
            figures.rtf(audio_seconds) / stead.rtf(audio_seconds)
        );
    }
    Ok(())
}

/// whisper.cpp on the same samples: its venv, its ggml model (written once), its timings.
fn run_peer(
    data: &std::path::Path,
    clips: &[Clip],
    threads: usize,
    runs: usize,
) -> anyhow::Result<(Figures, String)> {
    let dir = data.join("setup").join("whisper-peer");
    let python = setup::ensure_venv(
        &dir,
        "python3",
        PEER_REQUIREMENTS,
        "pywhispercpp (whisper.cpp)",
        &[],
        &mut |line| eprintln!("{line}"),
    )?;
    std::fs::write(dir.join("peer_whisper.py"), PEER_SCRIPT)?;
    std::fs::write(dir.join("ct2_reader.py"), stead_inference::CT2_READER)?;
    let scratch = tempfile::tempdir()?;
    let mut files = Vec::new();
    for clip in clips {
        let path = scratch.path().join(format!("{}.f32", clip.name));
        let bytes: Vec<u8> = clip.samples.iter().flat_map(|s| s.to_le_bytes()).collect();
        std::fs::write(&path, bytes)?;
        files.push(path);
    }
    let output = Command::new(&python)
        .arg(dir.join("peer_whisper.py"))
        .arg("--source")
        .arg(data.join("setup").join("whisper-source"))
        .arg("--ggml")
        .arg(dir.join("ggml-tiny.en.bin"))
        .arg("--audio")
        .args(&files)
        .args([
            "--threads",
            &threads.to_string(),
            "--runs",
            &runs.to_string(),
        ])
        .stderr(std::process::Stdio::inherit())
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "the whisper.cpp peer exited with {}",
        output.status
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let answer: Value = serde_json::from_str(text.trim().lines().last().unwrap_or_default())
        .context("the whisper.cpp peer's output is not JSON")?;
    let mut figures = Figures::default();
    for result in answer["results"].as_array().into_iter().flatten() {
        figures
            .seconds
            .push(result["seconds"].as_f64().unwrap_or(f64::NAN));
        figures
            .texts
            .push(result["text"].as_str().unwrap_or_default().to_string());
    }
    anyhow::ensure!(
        figures.seconds.len() == clips.len(),
        "the peer answered {} of {} clips",
        figures.seconds.len(),
        clips.len()
    );
    Ok((
        figures,
        answer["peer"].as_str().unwrap_or("whisper.cpp").to_string(),
    ))
}

//! The real Whisper model (`stead setup` prepares `models/whisper-tiny.en`) through
//! `POST /v1/audio/transcriptions` of `stead serve`: five LibriVox sentences
//! (tests/fixtures/speech, labelled) transcribed with a word error rate under 10 % together;
//! one of them as Ogg/Opus, Ogg/Vorbis and MP3 heard the same; silence heard as nothing; and a
//! voice message recorded by Chromium (its fake microphone playing one of the sentences: WebM
//! with Opus), transcribed into the web UI's composer and sent with the recording attached.

use serde_json::Value;
use stead_inference::speech::wer::{word_errors as errors, words};
use stead_testkit::client::Api;
use stead_testkit::stead::{prepared_data_dir, Stead};

const CLIPS: [&str; 5] = ["0870", "0880", "0890", "0920", "0930"];

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/speech/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

async fn transcribe(server: &Stead, file: &str, bytes: &[u8]) -> Value {
    let (status, kind, body) = server
        .post_form(
            "/v1/audio/transcriptions",
            &[
                ("file", Some(file), bytes),
                ("model", None, b"whisper"),
                ("response_format", None, b"verbose_json"),
            ],
            None,
        )
        .await;
    assert_eq!(status, 200, "{file}: {body}");
    assert!(kind.starts_with("application/json"), "{kind}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whisper_transcribes_labelled_speech_in_every_container() {
    let server = Stead::start_in(prepared_data_dir(), "", None);
    let (mut total_words, mut total_errors) = (0, 0);
    for clip in CLIPS {
        let answer = transcribe(
            &server,
            &format!("librivox-{clip}.flac"),
            &fixture(&format!("librivox-{clip}.flac")),
        )
        .await;
        let reference =
            words(&String::from_utf8(fixture(&format!("librivox-{clip}.txt"))).unwrap());
        let heard = words(answer["text"].as_str().unwrap());
        let wrong = errors(&reference, &heard);
        eprintln!("{clip}: {wrong}/{} wrong: {heard:?}", reference.len());
        // No clip is mostly wrong, whatever the CPU's int8 kernels round.
        assert!(
            wrong * 3 <= reference.len(),
            "{clip}: {heard:?} against {reference:?}"
        );
        total_words += reference.len();
        total_errors += wrong;
        assert_eq!(answer["language"], "english");
        let duration = answer["duration"].as_f64().unwrap();
        assert!(duration > 2.5 && duration < 7.5, "{answer}");
        let segment = &answer["segments"][0];
        assert_eq!(segment["start"], 0.0);
        assert!(
            (segment["end"].as_f64().unwrap() - duration).abs() < 1e-6,
            "{answer}"
        );
    }
    let wer = total_errors as f64 / total_words as f64;
    eprintln!(
        "word error rate {:.1} % ({total_errors}/{total_words})",
        wer * 100.0
    );
    assert!(wer <= 0.10, "word error rate {wer}");

    // The same sentence in each container and codec.
    let expected = words("he might even have been made amiable himself");
    for file in [
        "librivox-0930.opus.ogg",
        "librivox-0930.vorbis.ogg",
        "librivox-0930.mp3",
    ] {
        let answer = transcribe(&server, file, &fixture(file)).await;
        let heard = words(answer["text"].as_str().unwrap());
        assert!(errors(&expected, &heard) <= 1, "{file}: {heard:?}");
    }

    // Two seconds of silence: nothing heard.
    let silence = wav(&vec![0i16; 32_000]);
    let (status, _, text) = server
        .post_form(
            "/v1/audio/transcriptions",
            &[
                ("file", Some("silence.wav"), &silence),
                ("model", None, b"whisper"),
                ("response_format", None, b"text"),
            ],
            None,
        )
        .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(text.trim(), "", "silence was heard as {text:?}");
}

/// A 16 kHz mono 16-bit WAV file.
fn wav(samples: &[i16]) -> Vec<u8> {
    let data: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    for field in [
        16u32.to_le_bytes().to_vec(),
        1u16.to_le_bytes().to_vec(),
        1u16.to_le_bytes().to_vec(),
        16_000u32.to_le_bytes().to_vec(),
        32_000u32.to_le_bytes().to_vec(),
        2u16.to_le_bytes().to_vec(),
        16u16.to_le_bytes().to_vec(),
    ] {
        out.extend_from_slice(&field);
    }
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&data);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_message_is_recorded_transcribed_and_sent_in_a_real_browser() {
    let web_ui = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web-ui");
    assert!(
        web_ui.join("../node_modules/playwright-core").is_dir(),
        "needs `npm ci` at the repository root (scripts/build-web-ui.sh runs it)"
    );
    // Chromium's fake microphone plays a WAV file: the sentence, then silence to stop in.
    let speech =
        stead_inference::speech::audio::decode(fixture("librivox-0870.flac"), None, 60).unwrap();
    let mut pcm: Vec<i16> = speech.iter().map(|s| (s * 32767.0) as i16).collect();
    pcm.extend(std::iter::repeat_n(0, 40_000));
    let dir = tempfile::tempdir().unwrap();
    let microphone = dir.path().join("microphone.wav");
    std::fs::write(&microphone, wav(&pcm)).unwrap();

    let server = Stead::start_in(prepared_data_dir(), "", None);
    let (id, _) = server.create("demo").await;
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-voice");
    let _ = std::fs::remove_dir_all(&out);
    let mut command = std::process::Command::new("node");
    command
        .current_dir(&web_ui)
        .arg("e2e/voice.mjs")
        .arg(&server.base)
        .arg(&out)
        .arg(&id)
        .arg(&microphone)
        .arg("9")
        .env(
            "CHROMIUM",
            std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
        );
    let stdout = stead_testkit::external::run(
        command,
        std::time::Duration::from_secs(480),
        "the browser run failed",
    )
    .await
    .stdout;
    let transcript = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v["transcript"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no transcript: {stdout}"));
    // Recorded as WebM/Opus by the browser and heard: the sentence's rarer words are there.
    let heard = words(&transcript);
    for word in ["dashwood", "leisure", "prudently"] {
        assert!(
            heard.iter().any(|w| w == word),
            "{word} not in {transcript:?}"
        );
    }
    for shot in ["41-voice-transcribed", "42-voice-sent"] {
        assert!(
            out.join(format!("{shot}.png")).is_file(),
            "screenshot {shot}"
        );
    }
    // The journal has the words as the message and the recording as its attachment.
    let journal = server.journal(&id).await;
    let message = journal
        .iter()
        .find(|e| e["kind"] == "user_message")
        .unwrap_or_else(|| panic!("{journal:?}"));
    assert_eq!(message["payload"]["text"], transcript.trim(), "{message}");
    let attachment = &message["payload"]["attachments"][0];
    assert!(
        attachment["content_type"]
            .as_str()
            .unwrap()
            .starts_with("audio/webm"),
        "{attachment}"
    );
}

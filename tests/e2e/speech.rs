//! `POST /v1/audio/transcriptions` through the binary without a prepared speech model
//! (docs/speech.md): every refusal is clear and comes before the model is needed, an artifact
//! is transcribed only by a caller who may read it, and an unprepared model says how to
//! prepare it. The real model's transcripts: tests/local_model/speech.rs.

use serde_json::Value;
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

/// A 16 kHz mono 16-bit WAV file of `seconds` of a quiet tone.
fn wav(seconds: f32) -> Vec<u8> {
    let data: Vec<u8> = (0..(16_000.0 * seconds) as usize)
        .map(|i| ((i as f32 * 0.05).sin() * 3000.0) as i16)
        .flat_map(i16::to_le_bytes)
        .collect();
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt \x10\0\0\0\x01\0\x01\0\x80\x3e\0\0\0\x7d\0\0\x02\0\x10\0data");
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&data);
    out
}

fn code(body: &str) -> String {
    let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    value["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcriptions_refuse_clearly_and_read_only_the_callers_artifacts() {
    let upstream = Upstream::respond(|_| Reply::text("ok")).await;
    let config = upstream.config(
        "default",
        "model = \"m\"",
        "[speech]\nmax_seconds = 2\n\n[[agents]]\nname = \"a\"\nroute = \"default\"\n",
    );
    let server = Stead::start(&config, None);
    let short = wav(1.0);
    let long = wav(3.0);
    let path = "/v1/audio/transcriptions";
    let model = ("model", None, b"whisper".as_slice());

    // Not a form.
    let (status, body) = server
        .call("POST", path, Some(serde_json::json!({"model": "whisper"})))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (415, Some("unsupported_media_type")),
        "{body}"
    );
    type Part<'a> = (&'a str, Option<&'a str>, &'a [u8]);
    let cases: Vec<(Vec<Part>, u16, &str, &str)> = vec![
        (
            vec![("file", Some("a.wav"), short.as_slice())],
            400,
            "invalid_request",
            "`model` is required",
        ),
        (vec![model], 400, "invalid_request", "`file`"),
        (
            vec![
                ("file", Some("a.wav"), short.as_slice()),
                ("model", None, b"gpt-4o-transcribe"),
            ],
            404,
            "model_not_found",
            "whisper",
        ),
        (
            vec![
                ("file", Some("a.wav"), short.as_slice()),
                model,
                ("response_format", None, b"srt"),
            ],
            400,
            "invalid_request",
            "response_format",
        ),
        (
            vec![
                ("file", Some("a.wav"), short.as_slice()),
                model,
                ("speed", None, b"2"),
            ],
            400,
            "invalid_request",
            "unknown field `speed`",
        ),
        (
            vec![("file", Some("a.txt"), b"just some text, not audio"), model],
            415,
            "unsupported_media_type",
            "not an audio file",
        ),
        (
            vec![("file", Some("long.wav"), long.as_slice()), model],
            413,
            "payload_too_large",
            "at most 2 s",
        ),
        // Everything is in order: only the model is missing, and the answer says how to get it.
        (
            vec![("file", Some("a.wav"), short.as_slice()), model],
            503,
            "unavailable",
            "stead setup",
        ),
    ];
    for (parts, status, expected, words) in cases {
        let (got, _, body) = server.post_form(path, &parts, None).await;
        assert_eq!((got, code(&body).as_str()), (status, expected), "{body}");
        assert!(body.contains(words), "{body}");
    }

    // An artifact: its session's token may transcribe it, another session's may not; a
    // session token may not upload a file to transcribe.
    let (a, a_token) = server.create("a").await;
    let (_, b_token) = server.create("a").await;
    let uploaded = reqwest::Client::new()
        .post(format!("{}/v1/artifacts?session_id={a}", server.base))
        .bearer_auth(&a_token)
        .body(short.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), 201);
    let artifact: Value = uploaded.json().await.unwrap();
    assert_eq!(artifact["content_type"], "audio/wav", "{artifact}");
    let id = artifact["id"].as_str().unwrap().as_bytes();
    let by_id = [("artifact_id", None, id), model];
    let (status, _, body) = server.post_form(path, &by_id, Some(&b_token)).await;
    assert_eq!((status, code(&body).as_str()), (403, "forbidden"), "{body}");
    let (status, _, body) = server.post_form(path, &by_id, Some(&a_token)).await;
    assert_eq!(
        (status, code(&body).as_str()),
        (503, "unavailable"),
        "{body}"
    );
    let (status, _, body) = server
        .post_form(
            path,
            &[("file", Some("a.wav"), short.as_slice()), model],
            Some(&a_token),
        )
        .await;
    assert_eq!(status, 403, "{body}");
    let missing = uuid::Uuid::now_v7().to_string();
    let (status, _, body) = server
        .post_form(
            path,
            &[("artifact_id", None, missing.as_bytes()), model],
            None,
        )
        .await;
    assert_eq!(
        (status, code(&body).as_str()),
        (404, "artifact_not_found"),
        "{body}"
    );
    let (status, _, body) = server
        .post_form(path, &[("artifact_id", None, b"nope"), model], None)
        .await;
    assert_eq!(
        (status, code(&body).as_str()),
        (400, "invalid_request"),
        "{body}"
    );
    let (status, _, body) = server
        .post_form(
            path,
            &[
                ("artifact_id", None, id),
                ("file", Some("a.wav"), short.as_slice()),
                model,
            ],
            None,
        )
        .await;
    assert_eq!(
        (status, code(&body).as_str()),
        (400, "invalid_request"),
        "{body}"
    );
}

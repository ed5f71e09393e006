//! `POST /v1/audio/transcriptions` through the binary without a prepared speech model
//! (docs/speech.md): every refusal is clear and comes before the model is needed, an artifact
//! is transcribed only by a caller who may read it, and an unprepared model says how to
//! prepare it; a `model` naming a route goes to its OpenAI-compatible providers (doubles here)
//! with failover and a request-log record. The real model's transcripts:
//! tests/local_model/speech.rs.

use std::sync::{Arc, Mutex};

use axum::response::IntoResponse;
use serde_json::{json, Value};
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

/// An OpenAI-compatible transcription double: answers `status` (200: a transcript) and keeps
/// each form it received, as text.
async fn transcriber(status: u16) -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = axum::Router::new().route(
        "/v1/audio/transcriptions",
        axum::routing::post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                kept.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&body).into_owned());
                if status == 200 {
                    axum::Json(
                        json!({"text": "hello from the double", "language": "english",
                        "duration": 1.0}),
                    )
                    .into_response()
                } else {
                    (axum::http::StatusCode::from_u16(status).unwrap(), "down").into_response()
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_transcribes_through_its_providers_with_failover() {
    let (down, down_seen) = transcriber(500).await;
    let (up, up_seen) = transcriber(200).await;
    let config = format!(
        "[[providers]]\nname = \"down\"\nkind = \"openai\"\nbase_url = \"{down}\"\n\n\
         [[providers]]\nname = \"up\"\nkind = \"openai\"\nbase_url = \"{up}\"\n\n\
         [[routes]]\nname = \"stt\"\ntargets = [{{ provider = \"down\", model = \"whisper-large\" }}, \
         {{ provider = \"up\", model = \"whisper-large\" }}]\n\n\
         [[agents]]\nname = \"a\"\nroute = \"stt\"\n"
    );
    let server = Stead::start(&config, None);
    let audio = wav(1.0);
    let (status, _, body) = server
        .post_form(
            "/v1/audio/transcriptions",
            &[
                ("file", Some("note.wav"), audio.as_slice()),
                ("model", None, b"stt"),
                ("language", None, b"en"),
                ("response_format", None, b"verbose_json"),
            ],
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            answer["text"].as_str(),
            answer["language"].as_str(),
            answer["duration"].as_f64()
        ),
        (Some("hello from the double"), Some("english"), Some(1.0)),
        "{answer}"
    );
    // The failing target was tried first; the second got the form: its model, the language,
    // and the audio's bytes under the client's file name.
    assert!(
        !down_seen.lock().unwrap().is_empty(),
        "the first target was not tried"
    );
    let form = up_seen.lock().unwrap().last().cloned().unwrap();
    assert!(
        form.contains("name=\"model\"\r\n\r\nwhisper-large\r\n"),
        "{form:.300}"
    );
    assert!(
        form.contains("name=\"language\"\r\n\r\nen\r\n"),
        "{form:.300}"
    );
    assert!(form.contains("filename=\"note.wav\""), "{form:.300}");
    assert!(
        form.contains("RIFF") && form.len() > audio.len(),
        "the audio was not sent"
    );

    // One request-log record for the call (written in batches: waited for), naming the target
    // that answered, no audio in it.
    let mut logs = Value::Null;
    for _ in 0..100 {
        logs = server
            .call("GET", "/v1/gateway/logs?route=stt", None)
            .await
            .1;
        if logs["logs"].as_array().is_some_and(|rows| !rows.is_empty()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let record = &logs["logs"][0];
    assert_eq!(record["provider"], "up", "{record}");
    assert_eq!(record["status"], "ok", "{record}");
    assert!(!record.to_string().contains("RIFF"), "{record}");

    // A key with a budget is refused before any provider is asked: routed audio is not
    // charged to budgets yet.
    let (status, _) = server
        .call("POST", "/v1/projects", Some(json!({"name": "capped"})))
        .await;
    assert_eq!(status, 201);
    let (status, created) = server
        .call(
            "POST",
            "/v1/projects/capped/keys",
            Some(json!({"name": "stt", "role": "inference", "budget_usd": 5.0})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let before = up_seen.lock().unwrap().len();
    let (status, _, body) = server
        .post_form(
            "/v1/audio/transcriptions",
            &[
                ("file", Some("note.wav"), audio.as_slice()),
                ("model", None, b"stt"),
            ],
            created["key"].as_str(),
        )
        .await;
    assert_eq!((status, code(&body).as_str()), (403, "forbidden"), "{body}");
    assert!(body.contains("budget"), "{body}");
    assert_eq!(
        up_seen.lock().unwrap().len(),
        before,
        "a provider was asked"
    );
}

//! The artifact store through the real binary, on both backends (docs/artifacts.md): an upload
//! into a session is typed by its bytes (not by what the client says), read back whole and by
//! ranges, refused past its size limit and to another session's token; the same bytes are one
//! blob on disk; a purge removes the session's artifacts and the blobs no other artifact
//! names.

use serde_json::Value;
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x02\0\0\0\x90wS\xde";

struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    bytes: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

async fn send(
    server: &Stead,
    method: reqwest::Method,
    path: &str,
    bearer: Option<&str>,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", server.base))
        .body(body);
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    Reply {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        bytes: response.bytes().await.unwrap().to_vec(),
    }
}

fn blob_file(server: &Stead, sha256: &str) -> std::path::PathBuf {
    server
        .data
        .path()
        .join("artifacts")
        .join(&sha256[..2])
        .join(&sha256[2..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_on_sqlite() {
    artifacts_are_typed_ranged_scoped_and_purged(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_on_postgres() {
    let scratch = stead_testkit::db::scratch_postgres("stead_artifacts").await;
    artifacts_are_typed_ranged_scoped_and_purged(Some(scratch.url())).await;
}

async fn artifacts_are_typed_ranged_scoped_and_purged(database: Option<&str>) {
    let server = Stead::start("[artifacts]\nmax_bytes = 4096\n", database);
    let (id, token) = server.create("demo").await;
    let (other, other_token) = server.create("demo").await;
    let post = reqwest::Method::POST;
    let get = reqwest::Method::GET;

    // Uploaded with the session's token, declared as HTML: stored as what the bytes are.
    let path = format!("/v1/artifacts?session_id={id}");
    let up = send(
        &server,
        post.clone(),
        &path,
        Some(&token),
        &[("content-type", "text/html")],
        PNG.to_vec(),
    )
    .await;
    assert_eq!(up.status, 201, "{}", up.json());
    let artifact = up.json();
    assert_eq!(artifact["content_type"], "image/png");
    assert_eq!(artifact["size"], PNG.len());
    assert_eq!(artifact["session_id"], id.as_str());
    let sha = artifact["sha256"].as_str().unwrap().to_string();
    assert_eq!(std::fs::read(blob_file(&server, &sha)).unwrap(), PNG);
    let artifact_path = format!("/v1/artifacts/{}", artifact["id"].as_str().unwrap());

    // Read back whole, typed, never sniffed by a browser; and by ranges.
    let whole = send(
        &server,
        get.clone(),
        &artifact_path,
        Some(&token),
        &[],
        vec![],
    )
    .await;
    assert_eq!(whole.status, 200);
    assert_eq!(whole.bytes, PNG);
    assert_eq!(whole.header("content-type"), "image/png");
    assert_eq!(whole.header("x-content-type-options"), "nosniff");
    assert_eq!(whole.header("etag"), format!("\"{sha}\""));
    for (range, want, content_range) in [
        ("bytes=0-7", &PNG[..8], format!("bytes 0-7/{}", PNG.len())),
        (
            "bytes=8-",
            &PNG[8..],
            format!("bytes 8-{}/{}", PNG.len() - 1, PNG.len()),
        ),
        (
            "bytes=-4",
            &PNG[PNG.len() - 4..],
            format!("bytes {}-{}/{}", PNG.len() - 4, PNG.len() - 1, PNG.len()),
        ),
    ] {
        let part = send(
            &server,
            get.clone(),
            &artifact_path,
            Some(&token),
            &[("range", range)],
            vec![],
        )
        .await;
        assert_eq!(part.status, 206, "{range}");
        assert_eq!(part.bytes, want, "{range}");
        assert_eq!(part.header("content-range"), content_range, "{range}");
    }
    let outside = send(
        &server,
        get.clone(),
        &artifact_path,
        Some(&token),
        &[("range", "bytes=999-")],
        vec![],
    )
    .await;
    assert_eq!(outside.status, 416);
    assert_eq!(outside.json()["error"]["code"], "range_not_satisfiable");
    assert_eq!(
        outside.header("content-range"),
        format!("bytes */{}", PNG.len())
    );

    // Another session's token reads nothing of it and cannot upload into it, nor upload
    // without a session; a body over the limit is refused by name.
    let foreign = send(
        &server,
        get.clone(),
        &artifact_path,
        Some(&other_token),
        &[],
        vec![],
    )
    .await;
    assert_eq!(foreign.status, 403, "{}", foreign.json());
    let into = send(
        &server,
        post.clone(),
        &path,
        Some(&other_token),
        &[],
        b"hi".to_vec(),
    )
    .await;
    assert_eq!(into.status, 403);
    let loose = send(
        &server,
        post.clone(),
        "/v1/artifacts",
        Some(&token),
        &[],
        b"hi".to_vec(),
    )
    .await;
    assert_eq!(loose.status, 403);
    let big = send(
        &server,
        post.clone(),
        &path,
        Some(&token),
        &[],
        vec![b'a'; 5000],
    )
    .await;
    assert_eq!(big.status, 413);
    assert_eq!(big.json()["error"]["code"], "artifact_too_large");
    let empty = send(&server, post.clone(), &path, Some(&token), &[], vec![]).await;
    assert_eq!(empty.status, 422);
    let (status, missing) = server
        .call(
            "GET",
            &format!("/v1/artifacts/{}", uuid::Uuid::now_v7()),
            None,
        )
        .await;
    assert_eq!(
        (status, missing["error"]["code"].as_str()),
        (404, Some("artifact_not_found"))
    );

    // Text without a signature is text; the same bytes in the other session are one blob.
    let text = send(
        &server,
        post.clone(),
        &path,
        Some(&token),
        &[("content-type", "application/x-msdownload")],
        b"just some notes".to_vec(),
    )
    .await;
    assert_eq!(text.json()["content_type"], "text/plain; charset=utf-8");
    let other_path = format!("/v1/artifacts?session_id={other}");
    let shared = send(
        &server,
        post.clone(),
        &other_path,
        Some(&other_token),
        &[],
        PNG.to_vec(),
    )
    .await;
    assert_eq!(shared.json()["sha256"], sha.as_str());
    let (status, listed) = server
        .call("GET", &format!("/v1/sessions/{id}/artifacts"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(listed["artifacts"].as_array().unwrap().len(), 2, "{listed}");
    let text_sha = text.json()["sha256"].as_str().unwrap().to_string();

    // A form upload: the `file` field is the artifact (its declared type a hint as ever); a
    // form without one is refused.
    let form = |file: bool| {
        let mut body =
            b"--XB\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n".to_vec();
        if file {
            body.extend_from_slice(b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.png\"\r\nContent-Type: text/html\r\n\r\n");
            body.extend_from_slice(PNG);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"--XB--\r\n");
        body
    };
    let multipart = [("content-type", "multipart/form-data; boundary=XB")];
    let formed = send(
        &server,
        post.clone(),
        &other_path,
        Some(&other_token),
        &multipart,
        form(true),
    )
    .await;
    assert_eq!(formed.status, 201, "{}", formed.json());
    assert_eq!(formed.json()["content_type"], "image/png");
    assert_eq!(formed.json()["sha256"], sha.as_str());
    let fileless = send(
        &server,
        post.clone(),
        &other_path,
        Some(&other_token),
        &multipart,
        form(false),
    )
    .await;
    assert_eq!(fileless.status, 422, "{}", fileless.json());

    // Purged: the session's artifacts go, the blob only it named goes, the shared one stays.
    let (status, purged) = server
        .call("DELETE", &format!("/v1/sessions/{id}?purge=true"), None)
        .await;
    assert_eq!(status, 200, "{purged}");
    assert_eq!(purged["artifacts"], 2);
    assert!(
        !blob_file(&server, &text_sha).exists(),
        "the unshared blob is still there"
    );
    assert!(blob_file(&server, &sha).exists(), "the shared blob went");
    let (status, _) = server.call("GET", &artifact_path, None).await;
    assert_eq!(status, 404);
    let kept = format!("/v1/artifacts/{}", shared.json()["id"].as_str().unwrap());
    let read = send(&server, get, &kept, Some(&other_token), &[], vec![]).await;
    assert_eq!(read.bytes, PNG);
}

//! Files that MCP tools return (docs/artifacts.md, "Tools' files"): the everything server's
//! `get-tiny-image` answers a PNG in base64; Stead keeps it as the session's artifact, the
//! journal names it (never the bytes), and the next model call shows it to the model.

use base64::Engine;
use stead_testkit::client::Api;
use stead_testkit::stead::{events, Stead};
use uuid::Uuid;

use super::{config, model, ready};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_image_is_kept_as_an_artifact_and_shown_to_the_model() {
    let marker = Uuid::now_v7().to_string();
    let root = tempfile::tempdir().unwrap();
    let upstream = model().await;
    let root_path = root.path().canonicalize().unwrap().display().to_string();
    let server = Stead::start(&config(&upstream, &marker, &root_path), None);
    ready(&server).await;
    let (id, token) = server.create("mcp").await;
    let mut ws = server.ws(&id, &token, "").await;
    ws.send(serde_json::json!({"type": "user_message", "text": "tiny image"}))
        .await;
    let frames = ws.until_event("turn_finished").await;
    let finished = events(&frames)
        .into_iter()
        .find(|e| e["kind"] == "tool_call_finished")
        .unwrap_or_else(|| panic!("{frames:?}"));
    let content = finished["payload"]["result"]["content"].as_array().unwrap();
    let image = content
        .iter()
        .find(|b| b["type"] == "image")
        .unwrap_or_else(|| panic!("{finished}"));
    // The journal names the artifact and keeps no base64.
    assert!(image.get("data").is_none(), "{image}");
    assert_eq!(image["mimeType"], "image/png");
    assert_eq!(image["content_type"], "image/png");
    let artifact = image["artifact_id"].as_str().unwrap();
    let sha256 = image["sha256"].as_str().unwrap();
    assert!(image["bytes"].as_u64().unwrap() > 100, "{image}");

    // The session lists it; its bytes are the PNG the tool sent.
    let (status, listed) = server
        .call("GET", &format!("/v1/sessions/{id}/artifacts"), None)
        .await;
    assert_eq!(status, 200, "{listed}");
    let row = &listed["artifacts"][0];
    assert_eq!(
        (row["id"].as_str(), row["sha256"].as_str()),
        (Some(artifact), Some(sha256)),
        "{listed}"
    );
    let bytes = reqwest::get(format!("{}/v1/artifacts/{artifact}", server.base))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(row["size"].as_u64(), Some(bytes.len() as u64));

    // The model call after the tool saw the image: a user message after the tool result,
    // naming the artifact, with the PNG as a data URL.
    let requests = upstream.requests();
    let after = requests
        .iter()
        .find(|r| {
            r["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["role"] == "tool")
        })
        .expect("a model call after the tool");
    let messages = after["messages"].as_array().unwrap();
    let tool_at = messages.iter().position(|m| m["role"] == "tool").unwrap();
    let shown = &messages[tool_at + 1];
    assert_eq!(shown["role"], "user", "{after}");
    let parts = shown["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{shown}"));
    let text = parts.iter().find(|p| p["type"] == "text").unwrap();
    assert!(text["text"].as_str().unwrap().contains(artifact), "{text}");
    let url = parts
        .iter()
        .find(|p| p["type"] == "image_url")
        .and_then(|p| p["image_url"]["url"].as_str())
        .unwrap_or_else(|| panic!("{shown}"));
    let data = url.strip_prefix("data:image/png;base64,").unwrap();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    assert_eq!(decoded, bytes.to_vec());
    // The tool's text blocks reached the model as text, the image's block by reference only.
    let tool_text = messages[tool_at]["content"].as_str().unwrap();
    assert!(
        tool_text.contains(artifact) && !tool_text.contains(data),
        "{tool_text}"
    );
}

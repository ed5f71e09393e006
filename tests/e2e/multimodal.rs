//! Images through the real binary, on both backends, with upstream doubles as the providers
//! (docs/multimodal.md): an image uploaded into a session and attached to a message reaches an
//! OpenAI-compatible provider as an `image_url` part carrying a base64 `data:` URL and an
//! Anthropic provider as an `image` block; a session whose route sees no images refuses the
//! message (422 `images_unsupported`, nothing journaled), while another file attached there is
//! named to the model in a line of text; an artifact of another session cannot be attached;
//! the three compatibility endpoints take images in their own shapes and pass them on; the
//! request log keeps no image bytes.

use base64::Engine as _;
use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

/// A 1×1 PNG.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x02\0\0\0\x90wS\xde\0\0\0\x0cIDATx\x9cc\xf8\xcf\xc0\0\0\x03\x01\x01\0\xc9\xfe\x92\xef\0\0\0\0IEND\xaeB`\x82";

fn config(openai: &Upstream, anthropic: &Upstream) -> String {
    format!(
        "[[providers]]\nname = \"up\"\nkind = \"openai\"\nbase_url = \"{}\"\n\n\
         [[providers]]\nname = \"claude\"\nkind = \"anthropic\"\nbase_url = \"{}\"\n\n\
         [[routes]]\nname = \"vision\"\ntargets = [{{ provider = \"up\", model = \"m\" }}]\n\n\
         [[routes]]\nname = \"claude\"\ntargets = [{{ provider = \"claude\", model = \"c\" }}]\n\n\
         [[routes]]\nname = \"text\"\nimages = false\n\
         targets = [{{ provider = \"up\", model = \"m\" }}]\n\n\
         [gateway.log]\nbodies = \"full\"\nflush_ms = 20\n\n\
         [[agents]]\nname = \"seer\"\nroute = \"vision\"\nsystem_prompt = \"You see.\"\n\n\
         [[agents]]\nname = \"reader\"\nroute = \"claude\"\nsystem_prompt = \"You read.\"\n\n\
         [[agents]]\nname = \"blind\"\nroute = \"text\"\nsystem_prompt = \"You listen.\"\n",
        openai.base_url,
        anthropic.anthropic_base_url()
    )
}

fn data_url() -> String {
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(PNG)
    )
}

/// Uploads `bytes` into session `id`; returns the artifact.
async fn upload(server: &Stead, id: &str, bytes: &[u8]) -> Value {
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/artifacts?session_id={id}", server.base))
        .body(bytes.to_vec());
    if let Some(key) = server.default_key() {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status().as_u16(), 201);
    response.json().await.unwrap()
}

async fn say_with(server: &Stead, id: &str, text: &str, artifacts: &[&Value]) -> (u16, Value) {
    let attachments: Vec<Value> = artifacts
        .iter()
        .map(|a| json!({ "artifact_id": a["id"] }))
        .collect();
    server
        .call(
            "POST",
            &format!("/v1/sessions/{id}/messages?wait=true"),
            Some(json!({ "text": text, "attachments": attachments })),
        )
        .await
}

/// The last user message of the last request a double received.
fn last_user(up: &Upstream) -> Value {
    let requests = up.requests();
    let request = requests.last().expect("the double was called");
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .cloned()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_on_sqlite() {
    images_reach_each_provider_in_its_shape(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_on_postgres() {
    let scratch = stead_testkit::db::scratch_postgres("stead_images").await;
    images_reach_each_provider_in_its_shape(Some(scratch.url())).await;
}

async fn images_reach_each_provider_in_its_shape(database: Option<&str>) {
    let openai = Upstream::start(vec![], Reply::text("a red square")).await;
    let anthropic = Upstream::start(vec![], Reply::text("a red square")).await;
    let server = Stead::start(&config(&openai, &anthropic), database);

    // A session on an OpenAI-compatible route: the attachment is an image_url part.
    let (seer, _) = server.create("seer").await;
    let image = upload(&server, &seer, PNG).await;
    assert_eq!(image["content_type"], "image/png");
    let (status, body) = say_with(&server, &seer, "What is this?", &[&image]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"], "a red square");
    assert_eq!(
        last_user(&openai)["content"],
        json!([
            { "type": "text", "text": "What is this?" },
            { "type": "image_url", "image_url": { "url": data_url() } },
        ])
    );
    // The journal holds the reference, never the bytes.
    let journal = server.journal(&seer).await;
    let message = journal
        .iter()
        .find(|e| e["kind"] == "user_message")
        .unwrap();
    assert_eq!(
        message["payload"]["attachments"],
        json!([{
            "artifact_id": image["id"],
            "content_type": "image/png",
            "size": PNG.len(),
            "sha256": image["sha256"],
        }])
    );
    // A later turn shows the model the earlier image again (it is in the history).
    let (status, _) = say_with(&server, &seer, "And now?", &[]).await;
    assert_eq!(status, 200);
    let history = openai.requests().last().unwrap()["messages"].clone();
    assert_eq!(history[1]["content"][1]["image_url"]["url"], data_url());

    // A session on an Anthropic route: an image block with a base64 source.
    let (reader, _) = server.create("reader").await;
    let image = upload(&server, &reader, PNG).await;
    let (status, body) = say_with(&server, &reader, "Describe it", &[&image]).await;
    assert_eq!(status, 200, "{body}");
    let encoded = base64::engine::general_purpose::STANDARD.encode(PNG);
    assert_eq!(
        last_user(&anthropic)["content"],
        json!([
            { "type": "text", "text": "Describe it" },
            { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": encoded } },
        ])
    );

    // A text-only route: the image is refused before anything is journaled...
    let (blind, _) = server.create("blind").await;
    let image = upload(&server, &blind, PNG).await;
    let before = server.journal(&blind).await.len();
    let calls = openai.requests().len();
    let (status, body) = say_with(&server, &blind, "What is this?", &[&image]).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "images_unsupported");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("`text`"));
    assert_eq!(server.journal(&blind).await.len(), before);
    assert_eq!(openai.requests().len(), calls);
    // ...while another file is named to the model in a line of text.
    let notes = upload(&server, &blind, b"meeting at noon").await;
    let (status, body) = say_with(&server, &blind, "Read my notes", &[&notes]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        last_user(&openai)["content"],
        format!(
            "[attached: text/plain; charset=utf-8, 15 bytes, artifact {}]\nmeeting at noon\n\
             [end of attachment]\n\nRead my notes",
            notes["id"].as_str().unwrap()
        )
    );

    // Another session's artifact cannot be attached.
    let (status, body) = say_with(&server, &seer, "Look", &[&notes]).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request");

    compatibility_endpoints(&server, &openai, &anthropic).await;

    // The request log (bodies kept in full) names the image's type and size, never its bytes.
    let logs = loop {
        let (_, page) = server.call("GET", "/v1/gateway/logs?limit=50", None).await;
        if page["logs"].as_array().map_or(0, Vec::len) >= 6 {
            break page.to_string();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(!logs.contains(&encoded), "the log holds an image's bytes");
    assert!(logs.contains(&format!("data:image/png;base64,[{} bytes]", PNG.len())));
}

/// `/v1/chat/completions`, `/v1/messages` and `/v1/responses` take images in their own shapes.
async fn compatibility_endpoints(server: &Stead, openai: &Upstream, anthropic: &Upstream) {
    let encoded = base64::engine::general_purpose::STANDARD.encode(PNG);
    let want = json!([
        { "type": "text", "text": "What is this?" },
        { "type": "image_url", "image_url": { "url": data_url() } },
    ]);
    let chat =
        json!({ "model": "vision", "messages": [{ "role": "user", "content": want.clone() }] });
    let (status, body) = server
        .call("POST", "/v1/chat/completions", Some(chat))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(last_user(openai)["content"], want);

    let messages = json!({
        "model": "vision",
        "max_tokens": 50,
        "messages": [{ "role": "user", "content": [
            { "type": "text", "text": "What is this?" },
            { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": encoded } },
        ] }],
    });
    let (status, body) = server.call("POST", "/v1/messages", Some(messages)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(last_user(openai)["content"], want);

    let responses = json!({
        "model": "claude",
        "input": [{ "role": "user", "content": [
            { "type": "input_text", "text": "What is this?" },
            { "type": "input_image", "image_url": data_url() },
        ] }],
    });
    let (status, body) = server.call("POST", "/v1/responses", Some(responses)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        last_user(anthropic)["content"],
        json!([
            { "type": "text", "text": "What is this?" },
            { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": encoded } },
        ])
    );

    // A text-only route refuses an image clearly; a malformed image is the caller's error.
    let chat =
        json!({ "model": "text", "messages": [{ "role": "user", "content": want.clone() }] });
    let (status, body) = server
        .call("POST", "/v1/chat/completions", Some(chat))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "images_unsupported");
    let bad = json!({ "model": "vision", "messages": [{ "role": "user", "content": [
        { "type": "image_url", "image_url": { "url": "data:text/html;base64,PGI+" } },
    ] }] });
    let (status, body) = server.call("POST", "/v1/chat/completions", Some(bad)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("image"));
}

/// The double's answer: how many images the whole request showed it.
fn count_images(request: &Value) -> Reply {
    let shown: usize = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|part| part["type"] == "image_url")
        .count();
    Reply::text(&match shown {
        1 => "I was shown 1 image.".to_string(),
        n => format!("I was shown {n} images."),
    })
}

/// `web-ui/e2e/attach.mjs`: a screenshot picked, sent and shown inline; a pasted and a dropped
/// image sent together; the double saw each as an `image_url` part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_attaches_pastes_and_drops_images() {
    let openai = Upstream::respond(count_images).await;
    let anthropic = Upstream::start(vec![], Reply::text("unused")).await;
    let server = Stead::start(&config(&openai, &anthropic), None);
    let (id, _) = server.create("seer").await;
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-screenshots");
    let shots = ["39-attach-screenshot", "40-attach-paste-drop"];
    stead_testkit::external::browser(
        "attach.mjs",
        &[&server.base, &out.to_string_lossy(), &id],
        &[],
        &out,
        &shots,
    )
    .await;
    // Three uploads, each a PNG the browser drew, all in the session; the second message
    // carried two.
    let (_, listed) = server
        .call("GET", &format!("/v1/sessions/{id}/artifacts"), None)
        .await;
    let artifacts = listed["artifacts"].as_array().unwrap();
    assert_eq!(artifacts.len(), 3, "{listed}");
    assert!(artifacts.iter().all(|a| a["content_type"] == "image/png"));
    let messages: Vec<Value> = server
        .journal(&id)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "user_message")
        .collect();
    assert_eq!(
        messages[0]["payload"]["attachments"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        messages[1]["payload"]["attachments"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let last = openai.requests().last().cloned().unwrap();
    let parts = last["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(parts[0]["text"], "And these two?");
    assert!(parts[1]["image_url"]["url"]
        .as_str()
        .unwrap()
        .starts_with("data:image/png;base64,iVBOR"));
}

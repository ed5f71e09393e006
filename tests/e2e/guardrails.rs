//! Guardrails on a route through the real binary, with the upstream double as the provider
//! (docs/guardrails.md): a `pii` redact guardrail — the double receives typed placeholders, the
//! same one for a value repeated across messages, and neither the request log (with full
//! bodies) nor the answer holds the raw values; a `deny_terms` block — 422 `guardrail_blocked`
//! naming the guardrail, the double never called, the log row without bodies; a route without
//! guardrails passes text as it is; a session whose model call is blocked fails its turn naming
//! the guardrail and goes on serving; a configuration naming a missing guardrail is refused.

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

const SECRET: &str = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";

fn config(up: &Upstream) -> String {
    up.config(
        "guarded",
        "model = \"m\"",
        "[[routes]]\nname = \"open\"\ntargets = [{ provider = \"up\", model = \"m\" }]\n\n\
         [[routes]]\nname = \"strict\"\ntargets = [{ provider = \"up\", model = \"m\" }]\n\
         guardrails = [\"secrets-out\", \"codenames\"]\n\n\
         [[guardrails]]\nname = \"secrets-out\"\nkind = \"pii\"\naction = \"redact\"\n\n\
         [[guardrails]]\nname = \"codenames\"\nkind = \"deny_terms\"\naction = \"block\"\n\
         terms = [\"Project Falcon\"]\n\n\
         [gateway.log]\nbodies = \"full\"\nflush_ms = 20\n\n\
         [[agents]]\nname = \"helper\"\nroute = \"strict\"\nsystem_prompt = \"You help.\"\n",
    )
    .replace(
        "[[routes]]\nname = \"guarded\"\ntargets = [{ provider = \"up\", model = \"m\" }]",
        "[[routes]]\nname = \"guarded\"\ntargets = [{ provider = \"up\", model = \"m\" }]\n\
         guardrails = [\"secrets-out\"]",
    )
}

fn chat(model: &str, messages: Value) -> Value {
    json!({ "model": model, "messages": messages })
}

/// Every text the double has received, joined.
fn received(up: &Upstream) -> String {
    up.requests()
        .iter()
        .map(|r| r["messages"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The last message of a request the double received.
fn last_message(request: &Value) -> Value {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default()
}

/// The request log once it holds at least `rows` rows (it is written in batches).
async fn logged(server: &Stead, rows: usize) -> Value {
    loop {
        let (_, page) = server.call("GET", "/v1/gateway/logs?limit=10", None).await;
        if page["logs"].as_array().map_or(0, Vec::len) >= rows {
            return page;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_routes_guardrails_redact_and_block_before_the_provider_sees_anything() {
    let up = Upstream::respond(|request: &Value| {
        // Echo what arrived, so the answer shows what the provider saw.
        let last = last_message(request);
        Reply::text(&format!(
            "you said: {}",
            last["content"].as_str().unwrap_or_default()
        ))
    })
    .await;
    let server = Stead::start(&config(&up), None);

    // Redacted: typed placeholders, consistent across the call's messages.
    let messages = json!([
        {"role": "system", "content": "The user is ann@example.com."},
        {"role": "user", "content": format!("Mail ann@example.com the key {SECRET}, card 4111 1111 1111 1111.")}
    ]);
    let (status, answer) = server
        .call(
            "POST",
            "/v1/chat/completions",
            Some(chat("guarded", messages)),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let seen = received(&up);
    assert!(seen.contains("The user is [EMAIL_1]."), "{seen}");
    assert!(
        seen.contains("Mail [EMAIL_1] the key [SECRET_1], card [CARD_1]."),
        "{seen}"
    );
    for raw in ["ann@example.com", SECRET, "4111 1111 1111 1111"] {
        assert!(!seen.contains(raw), "the provider saw {raw}");
        assert!(!answer.to_string().contains(raw), "the answer holds {raw}");
    }

    // Not on a route without guardrails.
    let (status, _) = server
        .call(
            "POST",
            "/v1/chat/completions",
            Some(chat(
                "open",
                json!([{"role": "user", "content": "I am bob@example.com"}]),
            )),
        )
        .await;
    assert_eq!(status, 200);
    assert!(received(&up).contains("I am bob@example.com"));

    // Blocked: a clear 422 naming the guardrail; the provider is never called.
    let before = up.requests().len();
    let (status, refused) = server
        .call(
            "POST",
            "/v1/chat/completions",
            Some(chat(
                "strict",
                json!([{"role": "user", "content": "Status of project falcon?"}]),
            )),
        )
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (422, Some("guardrail_blocked")),
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`codenames`") && message.contains("TERM"),
        "{message}"
    );
    assert!(!message.to_lowercase().contains("falcon"), "{message}");
    assert_eq!(up.requests().len(), before, "the provider was called");
    // `/metrics` counts each guardrail's acts by place.
    let metrics = server.metrics().await;
    for line in [
        r#"stead_guardrail_verdicts_total{guardrail="secrets-out",place="request",effect="redact"} 1"#,
        r#"stead_guardrail_verdicts_total{guardrail="codenames",place="request",effect="block"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }

    // The request log: rows for all three calls; no raw value in any, the blocked one's status.
    let logs = logged(&server, 3).await;
    let text = logs.to_string();
    for raw in ["ann@example.com", SECRET, "4111 1111 1111 1111", "falcon"] {
        assert!(!text.contains(raw), "the request log holds {raw}: {text}");
    }
    assert!(text.contains("[EMAIL_1]"), "{text}");
    let blocked: Vec<&Value> = logs["logs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["route"] == "strict")
        .collect();
    assert_eq!(blocked.len(), 1, "{logs}");
    assert_eq!(blocked[0]["status"], "error", "{}", blocked[0]);
    // Each row says which guardrails acted, where, and what they found (never the text).
    assert_eq!(
        blocked[0]["guardrails"],
        json!([{"guardrail": "codenames", "place": "request", "effect": "block", "entities": ["TERM"]}])
    );
    let guarded = logs["logs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["route"] == "guarded")
        .unwrap();
    assert_eq!(
        guarded["guardrails"],
        json!([{"guardrail": "secrets-out", "place": "request", "effect": "redact",
                "entities": ["EMAIL", "SECRET", "CARD"]}])
    );
    let open = logs["logs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["route"] == "open")
        .unwrap();
    assert_eq!(open["guardrails"], json!([]));
    assert!(
        blocked[0]["error"]
            .as_str()
            .unwrap()
            .contains("`codenames`"),
        "{}",
        blocked[0]
    );

    // A session's model call refused by a guardrail fails its turn, naming it; the server
    // goes on.
    let (id, _) = server.create("helper").await;
    server.say(&id, "Any news on Project Falcon?").await;
    server.wait_for_status(&id, "idle").await;
    let journal = server.journal(&id).await;
    let failed = journal
        .iter()
        .find(|e| e["kind"] == "model_call_failed")
        .unwrap_or_else(|| panic!("{journal:#?}"));
    assert!(
        failed["payload"]["error"]
            .as_str()
            .unwrap()
            .contains("guardrail `codenames` blocked"),
        "{failed}"
    );
    let (status, _) = server.call("GET", "/healthz", None).await;
    assert_eq!(status, 200);

    // Embedding inputs pass the route's guardrails too: the provider embeds the placeholder,
    // and a `block` refuses the call before any provider.
    let (status, body) = server
        .call(
            "POST",
            "/v1/embeddings",
            Some(json!({"model": "guarded", "input": ["mail ann@example.com today"]})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let embedded = up.requests().last().unwrap()["input"].to_string();
    assert!(
        embedded.contains("mail [EMAIL_1] today") && !embedded.contains("ann@"),
        "{embedded}"
    );
    let before = up.requests().len();
    let (status, refused) = server
        .call(
            "POST",
            "/v1/embeddings",
            Some(json!({"model": "strict", "input": "Project Falcon notes"})),
        )
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (422, Some("guardrail_blocked")),
        "{refused}"
    );
    assert_eq!(up.requests().len(), before, "the provider was called");
}

#[test]
fn a_route_naming_a_missing_guardrail_is_refused_at_start() {
    let config =
        "[[providers]]\nname = \"up\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\n\n\
                  [[routes]]\nname = \"r\"\ntargets = [{ provider = \"up\", model = \"m\" }]\n\
                  guardrails = [\"nope\"]\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stead.toml"), config).unwrap();
    let output = stead_testkit::stead::serve_in(dir.path()).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("routes.r.guardrails") && stderr.contains("`nope`"),
        "{stderr}"
    );
}

/// An answer goes through the route's guardrails too, streamed or not: the SSE stream a client
/// reads, a session's WebSocket deltas, the whole answer, a session's journal and the request
/// log hold the same redacted text, with the request's placeholder for a value the request
/// held — on SQLite and on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_redacted_before_any_byte_of_a_secret_reaches_a_client_on_sqlite() {
    answer_is_redacted(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_redacted_before_any_byte_of_a_secret_reaches_a_client_on_postgres() {
    let scratch = stead_testkit::db::scratch_postgres("stead_guardrails").await;
    answer_is_redacted(Some(scratch.url())).await;
}

async fn answer_is_redacted(database: Option<&str>) {
    let answer = format!(
        "Here it is: {SECRET} for ann@example.com, and the phone +44 20 7946 0958 works too."
    );
    let reply = answer.clone();
    let up = Upstream::respond(move |_: &Value| {
        Reply::paced(&reply, std::time::Duration::from_millis(2))
    })
    .await;
    let config = config(&up).replace(
        "[[agents]]\nname = \"helper\"\nroute = \"strict\"",
        "[[agents]]\nname = \"helper\"\nroute = \"guarded\"",
    );
    let server = Stead::start(&config, database);
    let ask = json!([{"role": "user", "content": "What is the key of ann@example.com?"}]);
    let expected =
        "Here it is: [SECRET_1] for [EMAIL_1], and the phone [PHONE_1] works too.".to_string();

    // Streamed: the raw SSE bytes a client reads.
    let mut body = chat("guarded", ask.clone());
    body["stream"] = json!(true);
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let sse = response.text().await.unwrap();
    for raw in [SECRET, "sk-proj", "ann@example.com", "7946 0958"] {
        assert!(!sse.contains(raw), "the stream carried {raw}: {sse}");
    }
    let streamed: String = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(streamed, expected);

    // Whole.
    let (status, whole) = server
        .call("POST", "/v1/chat/completions", Some(chat("guarded", ask)))
        .await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["choices"][0]["message"]["content"], expected.as_str());

    // A session: a WebSocket client's deltas and the journal hold the redacted reply.
    let (id, token) = server.create("helper").await;
    let mut ws = server.ws(&id, &token, "").await;
    server.say(&id, "the key please").await;
    let frames = ws.until_event("assistant_message").await;
    let deltas: String = frames
        .iter()
        .filter(|f| f["type"] == "delta")
        .filter_map(|f| f["text"].as_str())
        .collect();
    assert_eq!(deltas, expected, "{frames:?}");
    let sent = Value::Array(frames).to_string();
    for raw in [SECRET, "sk-proj", "ann@example.com", "7946 0958"] {
        assert!(!sent.contains(raw), "the WebSocket carried {raw}: {sent}");
    }
    server.wait_for_status(&id, "idle").await;
    let journal = server.journal(&id).await;
    let reply = journal
        .iter()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap_or_else(|| panic!("{journal:#?}"));
    assert_eq!(reply["payload"]["text"], expected.as_str(), "{reply}");
    let text = serde_json::to_string(&journal).unwrap();
    assert!(
        !text.contains(SECRET) && !text.contains("7946 0958"),
        "{text}"
    );

    // The request log, with full bodies: three answers, none raw, each row naming the
    // redactions of its request and of its answer.
    let logs = logged(&server, 3).await;
    let text = logs.to_string();
    assert!(
        !text.contains(SECRET) && !text.contains("7946 0958"),
        "{text}"
    );
    assert!(text.contains("[SECRET_1]"), "{text}");
    for row in logs["logs"].as_array().unwrap() {
        assert!(
            row["guardrails"].as_array().unwrap().contains(&json!({
                "guardrail": "secrets-out", "place": "answer", "effect": "redact",
                "entities": ["SECRET", "EMAIL", "PHONE"]
            })),
            "{row}"
        );
    }
}

/// With `restore_for_tools`, a placeholder the model writes into a tool call stands for its
/// value: the tool gets the address, while the provider — in this request and in the next one,
/// whose history holds the call and its result — sees only the placeholder.
#[tokio::test]
async fn a_tool_gets_the_value_of_a_placeholder_the_provider_never_sees() {
    let up = Upstream::respond(|request: &Value| {
        let last = last_message(request);
        if last["role"] == "tool" {
            Reply::text("Sent.")
        } else {
            Reply::tool("send_mail", json!({"to": "[EMAIL_1]", "body": "hello"}))
        }
    })
    .await;
    let hook = stead_testkit::webhook::Webhook::start().await;
    let config = up.config(
        "mailer",
        "model = \"m\"",
        &format!(
            "guardrails = [\"addresses\"]\n\n\
             [[guardrails]]\nname = \"addresses\"\nkind = \"pii\"\naction = \"redact\"\n\
             entities = [\"EMAIL\"]\nrestore_for_tools = true\n\n\
             [[agents]]\nname = \"mailer\"\nroute = \"mailer\"\nsystem_prompt = \"You send mail.\"\n\n\
             [[agents.tools]]\nname = \"send_mail\"\nkind = \"webhook\"\nurl = \"{}\"\n\
             description = \"Sends a mail\"\napproval = \"never\"\n",
            hook.url("/send")
        ),
    );
    // `guardrails` belongs to the route the double's config opens.
    let config = config.replacen(
        "targets = [{ provider = \"up\", model = \"m\" }]\n\nguardrails",
        "targets = [{ provider = \"up\", model = \"m\" }]\nguardrails",
        1,
    );
    let server = Stead::start(&config, None);
    let (id, _) = server.create("mailer").await;
    server.say(&id, "Mail ann@example.com a hello.").await;
    server.wait_for_status(&id, "idle").await;

    let sent = hook.bodies();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["arguments"]["to"], "ann@example.com", "{}", sent[0]);
    let seen = received(&up);
    assert!(
        !seen.contains("ann@example.com"),
        "the provider saw the address: {seen}"
    );
    let requests = up.requests();
    assert_eq!(requests.len(), 2);
    let history = requests[1]["messages"].to_string();
    assert!(history.contains("[EMAIL_1]"), "{history}");
    let journal = server.journal(&id).await;
    let reply = journal
        .iter()
        .rfind(|e| e["kind"] == "assistant_message")
        .unwrap();
    assert_eq!(reply["payload"]["text"], "Sent.");
}

/// The short run of `stead bench guardrails`: it runs, and prints every figure.
#[test]
fn the_guardrails_bench_runs_short() {
    let output = stead_testkit::stead::command()
        .args(["bench", "guardrails", "--samples", "200", "--json"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let figures: Value = serde_json::from_slice(&output.stdout).unwrap();
    for figure in [
        "check_with_pii",
        "check_without_pii",
        "redact",
        "streamed_answer_16_byte_pieces",
    ] {
        let p99 = figures[figure]["p99_us"].as_f64().unwrap_or(-1.0);
        assert!(p99 > 0.0, "{figure}: {figures}");
    }
    assert_eq!(figures["target_p99_us"], 1000.0);
}

/// `stead bench guardrail-quality` needs its peers prepared (it fetches nothing): without them
/// it says which script prepares them. Its figures are in docs/benchmarks.md.
#[test]
fn the_quality_bench_names_the_script_that_prepares_its_peers() {
    let missing = tempfile::tempdir().unwrap();
    let output = stead_testkit::stead::command()
        .args(["bench", "guardrail-quality", "--peers"])
        .arg(missing.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("scripts/guardrail-peers.sh"), "{stderr}");
}

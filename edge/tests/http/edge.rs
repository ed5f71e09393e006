//! The edge in front of every handler, over real sockets: an open server (no API keys) refuses
//! foreign `Host` and `Origin` headers (DNS rebinding, pages of other sites), every response
//! carries the security headers, a client that never finishes its headers is cut off, the
//! server holds at most `max_connections` sockets and a session at most `ws_per_session`
//! WebSockets — each refusal with its documented error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use stead_testkit::app::{ops_agent, App};
use stead_testkit::client::Api;
use stead_testkit::model::ScriptedModel;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Error as WsError;

async fn app_with(limits: stead_http::Limits, options: stead_http::ServeOptions) -> App {
    let model = ScriptedModel::respond(|_| ("ok".to_string(), vec![]));
    App::start_with(vec![ops_agent()], Arc::new(model), &[], limits, options).await
}

fn address(app: &App) -> String {
    app.base.trim_start_matches("http://").to_string()
}

/// One raw HTTP/1.1 exchange; returns the status, the headers (lower-cased) and the body.
async fn raw_get(app: &App, path: &str, headers: &[(&str, &str)]) -> (u16, String, Value) {
    let mut stream = TcpStream::connect(address(app)).await.unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (
        status,
        head.to_ascii_lowercase(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_server_refuses_foreign_hosts_and_origins() {
    let app = app_with(Default::default(), Default::default()).await;
    let host = address(&app);
    let (status, _, _) = raw_get(&app, "/v1/sessions", &[("host", &host)]).await;
    assert_eq!(status, 200);
    let (status, _, _) = raw_get(&app, "/v1/sessions", &[("host", "localhost:1")]).await;
    assert_eq!(status, 200);

    // DNS rebinding: the page's own name arrives as the Host.
    let (status, _, body) = raw_get(&app, "/v1/sessions", &[("host", "evil.example")]).await;
    assert_eq!(status, 403);
    assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");
    // A page of another site calling loopback directly.
    let (status, _, body) = raw_get(
        &app,
        "/v1/sessions",
        &[("host", &host), ("origin", "https://evil.example")],
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(body["error"]["code"], "origin_not_allowed", "{body}");
    // The UI's own origin passes.
    let origin = format!("http://{host}");
    let (status, _, _) = raw_get(
        &app,
        "/v1/sessions",
        &[("host", &host), ("origin", &origin)],
    )
    .await;
    assert_eq!(status, 200);

    // A WebSocket upgrade from another site is refused before it upgrades.
    let (id, token) = app.create("ops").await;
    let url = format!("ws://{host}/v1/sessions/{id}/ws?token={token}");
    let mut request = url.as_str().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("origin", "https://evil.example".parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Err(WsError::Http(response)) => assert_eq!(response.status(), 403),
        other => panic!("a foreign origin upgraded: {:?}", other.map(|_| ())),
    }
    let mut request = url.as_str().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("origin", origin.parse().unwrap());
    let (stream, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let mut ws = stead_testkit::client::Ws { stream };
    assert_eq!(ws.next().await.unwrap()["type"], "hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_the_security_headers() {
    let app = app_with(Default::default(), Default::default()).await;
    let host = address(&app);
    for path in ["/", "/v1/sessions", "/no/such/path"] {
        let (_, head, _) = raw_get(&app, path, &[("host", &host)]).await;
        assert!(
            head.contains("content-security-policy: ") && head.contains("frame-ancestors 'none'"),
            "{path}: {head}"
        );
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
        assert!(head.contains("referrer-policy: no-referrer"), "{head}");
        assert!(head.contains("x-frame-options: deny"), "{head}");
    }
    // Refusals too.
    let (status, head, _) = raw_get(&app, "/", &[("host", "evil.example")]).await;
    assert_eq!(status, 403);
    assert!(head.contains("frame-ancestors 'none'"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_headers_is_cut_off() {
    let options = stead_http::ServeOptions {
        header_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let app = app_with(Default::default(), options).await;
    let mut stream = TcpStream::connect(address(&app)).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ")
        .await
        .unwrap();
    let started = Instant::now();
    let mut buffer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut buffer))
        .await
        .expect("the server closed the half-sent request");
    // Closed (hyper may answer 408 first), not left hanging.
    assert!(read.is_ok() || buffer.is_empty());
    assert!(
        buffer.is_empty() || String::from_utf8_lossy(&buffer).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&buffer)
    );
    assert!(started.elapsed() >= Duration::from_millis(400));
    // A client that sends in time is served on the same server.
    let (status, _, _) = raw_get(&app, "/healthz", &[("host", "127.0.0.1")]).await;
    assert_eq!(status, 200);
}

/// A body trickled a byte at a time is cut off at the whole-body deadline on
/// any route (before: only the headers had a timeout, and 40 such connections held every
/// slot), and the server goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_trickled_past_its_deadline_is_cut_off() {
    let options = stead_http::ServeOptions {
        body_timeout: Duration::from_millis(800),
        ..Default::default()
    };
    let app = app_with(Default::default(), options).await;
    for path in ["/v1/messages", "/v1/sessions"] {
        let stream = TcpStream::connect(address(&app)).await.unwrap();
        let (mut reader, mut writer) = stream.into_split();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             content-length: 1000\r\n\r\n{{"
        );
        writer.write_all(head.as_bytes()).await.unwrap();
        let started = Instant::now();
        let trickle = tokio::spawn(async move {
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if writer.write_all(b" ").await.is_err() {
                    break;
                }
            }
        });
        let mut answer = Vec::new();
        let mut buffer = [0u8; 4096];
        while !String::from_utf8_lossy(&answer).contains("\r\n\r\n") {
            match tokio::time::timeout(Duration::from_secs(10), reader.read(&mut buffer)).await {
                Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buffer[..n]),
                _ => break,
            }
        }
        trickle.abort();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 400"), "{path}: {answer}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{path}: answered after {:?}",
            started.elapsed()
        );
    }
    let (status, _, _) = raw_get(&app, "/healthz", &[("host", "127.0.0.1")]).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_get_503_overloaded() {
    let options = stead_http::ServeOptions {
        max_connections: 3,
        ..Default::default()
    };
    let app = app_with(Default::default(), options).await;
    // Three idle keep-alive clients hold every slot.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(address(&app)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, _, body) = raw_get(&app, "/healthz", &[("host", "127.0.0.1")]).await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "overloaded", "{body}");
    // A slot frees when a client leaves.
    drop(held.pop());
    let mut served = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if raw_get(&app, "/healthz", &[("host", "127.0.0.1")]).await.0 == 200 {
            served = true;
            break;
        }
    }
    assert!(served, "a freed slot was never reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holds_at_most_its_websocket_allowance() {
    let limits = stead_http::Limits {
        ws_per_session: 2,
        ..Default::default()
    };
    let app = app_with(limits, Default::default()).await;
    let (id, token) = app.create("ops").await;
    let (other, other_token) = app.create("ops").await;
    let mut first = app.ws(&id, &token, "").await;
    let second = app.ws(&id, &token, "").await;
    assert_eq!(first.next().await.unwrap()["type"], "hello");
    let url = format!(
        "{}/v1/sessions/{id}/ws?token={token}",
        app.base.replace("http://", "ws://")
    );
    match tokio_tungstenite::connect_async(url.as_str()).await {
        Err(WsError::Http(response)) => {
            assert_eq!(response.status(), 429);
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
            assert_eq!(body["error"]["code"], "too_many_websockets", "{body}");
        }
        other => panic!("a third WebSocket opened: {:?}", other.map(|_| ())),
    }
    // Another session is not affected.
    let mut elsewhere = app.ws(&other, &other_token, "").await;
    assert_eq!(elsewhere.next().await.unwrap()["type"], "hello");
    // Closing one frees its slot.
    drop(second);
    let mut opened = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if tokio_tungstenite::connect_async(url.as_str()).await.is_ok() {
            opened = true;
            break;
        }
    }
    assert!(opened, "a closed WebSocket kept its slot");
}

/// `?wait=true` requests were unbounded subscribers of their
/// session. Past `ws_per_session` waits at once, a message is still sent but answered 202 at
/// once; the waits in place still end with the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holds_at_most_its_allowance_of_waiting_requests() {
    let limits = stead_http::Limits {
        ws_per_session: 2,
        ..Default::default()
    };
    let model = ScriptedModel::respond(|_| ("ok".to_string(), vec![]))
        .with_delay(Duration::from_millis(1500));
    let app = App::start_with(
        vec![ops_agent()],
        Arc::new(model),
        &[],
        limits,
        Default::default(),
    )
    .await;
    let (id, _) = app.create("ops").await;
    let path = format!("/v1/sessions/{id}/messages?wait=true");
    let say = |text: &'static str| {
        let path = path.clone();
        let app = &app;
        async move {
            let started = Instant::now();
            let (status, body) = app
                .call("POST", &path, Some(serde_json::json!({ "text": text })))
                .await;
            (status, started.elapsed(), body)
        }
    };
    let third = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        say("three").await
    };
    let (first, second, third) = tokio::join!(say("one"), say("two"), third);
    assert_eq!(
        third.0, 202,
        "over the allowance: accepted, not waited: {}",
        third.2
    );
    assert!(third.1 < Duration::from_millis(1000), "{:?}", third.1);
    assert_eq!((first.0, second.0), (200, 200), "{} {}", first.2, second.2);
}

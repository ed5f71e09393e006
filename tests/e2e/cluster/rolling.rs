//! A rolling restart of the cluster of `super` under steady chat load: each node in turn
//! drains on SIGTERM and starts again while a client keeps messaging through the nodes that
//! are up and a WebSocket client follows one session, reconnecting through another node and
//! resuming after each 1001.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stead_testkit::client::Api;

use super::Cluster;

/// A rolling restart under steady chat load: each node in turn gets SIGTERM (it drains and
/// hands its sessions over), exits 0 and starts again, while a client keeps messaging three
/// sessions through the nodes that are up. No request fails (a connection a stopping node
/// refuses is a reconnect, tried on another node); every answered message is in its journal
/// once, and the journals have no gaps. A WebSocket client following the first session
/// reconnects through another node whenever its node drains, resuming after the last seq it
/// saw: it ends up with the session's whole journal, each event once, in order, equal by
/// value — no event lost across the restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_chat_load_fails_no_request() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    let mut cluster = Cluster::start(3).await;
    let bases: Vec<String> = (0..3).map(|i| cluster.node(i).base.clone()).collect();
    let mut sessions = Vec::new();
    let mut tokens = Vec::new();
    for i in 0..3 {
        let (id, token) = cluster.node(i).create("ops").await;
        sessions.push(id);
        tokens.push(token);
    }
    // The third session held by node 2 (restarted last); a WebSocket to it through every
    // node, those on nodes 0 and 1 proxied. Each must end with 1001 when its own node drains
    // — a proxying node closes its proxied clients as it closes its own — so that the client
    // knows to reconnect and resume.
    let (status, _) = cluster.node(2).say(&sessions[2], "hello").await;
    assert_eq!(status, 200);
    let mut sockets = Vec::new();
    for i in 0..3 {
        let mut ws = cluster.node(i).ws(&sessions[2], &tokens[2], "").await;
        assert_eq!(ws.next().await.expect("hello")["type"], "hello");
        sockets.push(ws);
    }
    let closes = tokio::spawn(async move {
        let mut codes = Vec::new();
        for mut ws in sockets {
            codes.push(close_code(&mut ws).await);
        }
        codes
    });
    let down: Arc<Vec<AtomicBool>> = Arc::new((0..3).map(|_| AtomicBool::new(false)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let reconnects = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let load = {
        let (down, stop, failures, reconnects, answered) = (
            down.clone(),
            stop.clone(),
            failures.clone(),
            reconnects.clone(),
            answered.clone(),
        );
        let sessions = sessions.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let session = &sessions[n % sessions.len()];
                let text = format!("message {n}");
                let mut node = n % 3;
                loop {
                    if down[node].load(Ordering::Relaxed) {
                        node = (node + 1) % 3;
                        continue;
                    }
                    let sent = client
                        .post(format!(
                            "{}/v1/sessions/{session}/messages?wait=true",
                            bases[node]
                        ))
                        .json(&json!({ "text": text }))
                        .send()
                        .await;
                    match sent {
                        Ok(response) if response.status() == 200 => {
                            answered
                                .lock()
                                .unwrap()
                                .push((session.clone(), text.clone()));
                            break;
                        }
                        Ok(response) => {
                            let status = response.status();
                            let body = response.text().await.unwrap_or_default();
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("node {node}: {status} {body}"));
                            break;
                        }
                        // The node stopped accepting between the check and the send.
                        Err(error) if error.is_connect() => {
                            reconnects.fetch_add(1, Ordering::Relaxed);
                            node = (node + 1) % 3;
                        }
                        Err(error) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("node {node}: {error}"));
                            break;
                        }
                    }
                }
            }
        })
    };
    let follower = tokio::spawn(follow(
        (0..3).map(|i| cluster.node(i).base.clone()).collect(),
        sessions[0].clone(),
        tokens[0].clone(),
        down.clone(),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..3 {
        down[i].store(true, Ordering::Relaxed);
        cluster.restart(i);
        down[i].store(false, Ordering::Relaxed);
        eprintln!("rolling restart: node {i} is back");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let codes = tokio::time::timeout(Duration::from_secs(30), closes)
        .await
        .expect("every WebSocket closed")
        .unwrap();
    assert_eq!(codes, [Some(1001); 3], "each WebSocket ended with 1001");
    let failures = failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "failed requests: {failures:#?}");
    let answered = answered.lock().unwrap().clone();
    eprintln!(
        "rolling restart: {} messages answered, {} reconnects, 0 failures",
        answered.len(),
        reconnects.load(Ordering::Relaxed)
    );
    assert!(
        answered.len() > 30,
        "the load kept going: {}",
        answered.len()
    );
    // The follower saw the first session's whole journal, once and in order, by value.
    let journal = cluster.node(1).journal(&sessions[0]).await;
    let (seen, resumes) = follower.await.unwrap();
    eprintln!(
        "rolling restart: the WebSocket follower resumed {resumes} times and saw {} events",
        seen.len()
    );
    assert!(resumes >= 1, "the follower's node drained at least once");
    assert_eq!(seen.len(), journal.len(), "every event once");
    assert_eq!(
        seen, journal,
        "the events the follower saw are the journal's"
    );
    for session in &sessions {
        let journal = cluster.node(0).journal(session).await;
        let seqs: Vec<i64> = journal.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "no gaps");
        let texts: Vec<&str> = journal
            .iter()
            .filter(|e| e["kind"] == "user_message")
            .filter_map(|e| e["payload"]["text"].as_str())
            .collect();
        for (_, text) in answered.iter().filter(|(s, _)| s == session) {
            let copies = texts.iter().filter(|t| *t == text).count();
            assert_eq!(copies, 1, "{text} is in {session}'s journal once");
        }
    }
}

/// The close code a WebSocket ends with (frames before it skipped); `None` when it ended
/// without a close frame.
async fn close_code(ws: &mut stead_testkit::client::Ws) -> Option<u16> {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        match ws.stream.next().await {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

/// Follows `session` over WebSocket until `stop` is set and it has seen the journal's last
/// event: through a node that is up, after the last seq seen; when the socket ends (its node
/// drains: 1001) it connects again through the next node that is up and resumes. Returns the
/// `event` frames' events (`{seq, kind, payload, at}`) and how many times it resumed.
async fn follow(
    bases: Vec<String>,
    session: String,
    token: String,
    down: std::sync::Arc<Vec<std::sync::atomic::AtomicBool>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (Vec<Value>, usize) {
    use futures_util::StreamExt;
    use std::sync::atomic::Ordering;
    use tokio_tungstenite::tungstenite::Message;

    let http = reqwest::Client::new();
    let mut seen: Vec<Value> = Vec::new();
    let mut connections = 0usize;
    let mut node = 1usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "the follower never caught up");
        if down[node].load(Ordering::Relaxed) {
            node = (node + 1) % bases.len();
            continue;
        }
        let after = seen.last().map_or(0, |e| e["seq"].as_i64().unwrap());
        if stop.load(Ordering::Relaxed) {
            // Done once the journal has nothing after what was seen.
            let page: Value = http
                .get(format!(
                    "{}/v1/sessions/{session}/events?after={after}&limit=1",
                    bases[node]
                ))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if page["events"].as_array().is_some_and(Vec::is_empty) {
                return (seen, connections.saturating_sub(1));
            }
        }
        let url = format!(
            "{}/v1/sessions/{session}/ws?token={token}&after_seq={after}",
            bases[node].replace("http://", "ws://")
        );
        let Ok((mut socket, _)) = tokio_tungstenite::connect_async(url).await else {
            // Its node stopped accepting: the next one.
            node = (node + 1) % bases.len();
            continue;
        };
        connections += 1;
        loop {
            let frame = tokio::time::timeout(Duration::from_millis(500), socket.next()).await;
            let text = match frame {
                Ok(Some(Ok(Message::Text(text)))) => text,
                Ok(Some(Ok(Message::Close(_)))) | Ok(Some(Err(_))) | Ok(None) => break,
                Ok(Some(Ok(_))) => continue,
                // Quiet: look at `stop` (and whether the journal is all seen) again.
                Err(_) if stop.load(Ordering::Relaxed) => break,
                Err(_) => continue,
            };
            let frame: Value = serde_json::from_str(&text).unwrap();
            if frame["type"] == "event" {
                let mut event = frame.clone();
                event.as_object_mut().unwrap().remove("type");
                let seq = event["seq"].as_i64().unwrap();
                let last = seen.last().map_or(0, |e| e["seq"].as_i64().unwrap());
                assert_eq!(seq, last + 1, "events in order, none skipped or repeated");
                seen.push(event);
            }
        }
        node = (node + 1) % bases.len();
    }
}

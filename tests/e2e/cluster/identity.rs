//! One node id, one live process (docs/cluster.md): a second `stead serve` started under a
//! live node's id at another address is refused; when the first one's heartbeat has lapsed
//! (here: frozen with SIGSTOP) the second takes the id, and the first, thawed, finds its
//! heartbeat refused and stops with an error instead of serving sessions under a shared name.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use stead_testkit::client::Api;
use stead_testkit::stead::{command, free_port, Stead};

use super::{Cluster, SECRET, SECRET_ENV};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_id_belongs_to_one_live_process() {
    let mut cluster = Cluster::start(1).await;
    let (config, port) = cluster.configs[0].clone();
    let other = free_port();
    let copy = config.replace(
        &format!("http://127.0.0.1:{port}"),
        &format!("http://127.0.0.1:{other}"),
    );
    assert_ne!(copy, config);

    // While node-0 beats, a process under its id at another address waits for the heartbeat
    // to lapse (TTL 3 s plus two beats), then gives up with an error.
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("stead.toml"), &copy).unwrap();
    let mut duplicate = command()
        .env(SECRET_ENV, SECRET)
        .env("DATABASE_URL", &cluster.url)
        .current_dir(data.path())
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{other}"),
            "--config",
            "stead.toml",
        ])
        .arg("--data-dir")
        .arg(data.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = duplicate.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = duplicate.kill();
            panic!("a second live process under node-0's id kept running");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut stderr = String::new();
    duplicate
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("node id `node-0` is in use by a live node"),
        "{stderr}"
    );
    let (status, view) = cluster.node(0).call("GET", "/v1/cluster", None).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(
        view["nodes"][0]["advertise_url"],
        format!("http://127.0.0.1:{port}")
    );

    // node-0 freezes past its TTL; a process under its id at another address takes the id.
    let frozen = cluster.node(0).pid();
    // SAFETY: plain syscall on a child pid the test owns.
    assert_eq!(unsafe { libc::kill(frozen, libc::SIGSTOP) }, 0);
    let successor = Stead::start_listening(
        tempfile::tempdir().unwrap(),
        &copy,
        Some(&cluster.url),
        &[(SECRET_ENV, SECRET)],
        &format!("127.0.0.1:{other}"),
    );
    // Thawed, node-0's next heartbeat is refused: it drains and exits with an error.
    let status = cluster.nodes[0].as_mut().unwrap().signal(libc::SIGCONT);
    assert!(
        !status.success(),
        "the superseded process stopped: {status}"
    );
    cluster.nodes[0] = None;
    let (status, view) = successor.call("GET", "/v1/cluster", None).await;
    assert_eq!(status, 200, "{view}");
    let nodes = view["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{view}");
    assert_eq!(nodes[0]["node_id"], "node-0");
    assert_eq!(
        nodes[0]["advertise_url"],
        format!("http://127.0.0.1:{other}")
    );
    assert_eq!(nodes[0]["alive"], true);
}

//! Runs an external client (a Python program, Schemathesis, a browser driver) against a server
//! under test: to its end or a time limit, with its output shown when it fails.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a finished client printed.
#[derive(Debug, Clone)]
pub struct Finished {
    pub stdout: String,
    pub stderr: String,
}

/// Runs a client program that prints one JSON object per line, each a check
/// (`{"check": name, "ok": bool, …}`): there must be `expected` of them and all must pass.
/// Returns them.
pub async fn checks(command: Command, limit: Duration, expected: usize) -> Vec<serde_json::Value> {
    let stdout = run(command, limit, "the client failed").await.stdout;
    let checks: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert_eq!(checks.len(), expected, "{stdout}");
    assert!(checks.iter().all(|c| c["ok"] == true), "{stdout}");
    checks
}

/// Runs `command` on a blocking thread, to its end or for at most `limit` (then its process
/// group is killed). Panics with `failure` and the client's output when it fails or runs
/// past the limit.
pub async fn run(command: Command, limit: Duration, failure: &str) -> Finished {
    let failure = failure.to_string();
    tokio::task::spawn_blocking(move || run_blocking(command, limit, &failure))
        .await
        .expect("the client's thread")
}

fn run_blocking(mut command: Command, limit: Duration, failure: &str) -> Finished {
    let program = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: a timeout kills what it started too.
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the client") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            // SAFETY: plain syscall on the process group of a child we own.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let finished = Finished {
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    };
    match status {
        None => panic!(
            "{failure}: still running after {limit:?}, killed ({program}):\n{}\n{}",
            finished.stdout, finished.stderr
        ),
        Some(status) => assert!(
            status.success(),
            "{failure} ({status}):\n{}\n{}",
            finished.stdout,
            finished.stderr
        ),
    }
    finished
}

/// A browser run: `web-ui/e2e/{script}` driving Debian's Chromium (`$CHROMIUM`, default
/// `/usr/bin/chromium`) through `playwright-core` with `args`, writing `shots` (PNG names
/// without extension) into `out`. The screenshots are removed first; the run must print
/// `{"done":true}` and leave every one of them. Returns what it printed.
pub async fn browser(
    script: &str,
    args: &[&str],
    env: &[(&str, &str)],
    out: &std::path::Path,
    shots: &[&str],
) -> String {
    let web_ui = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web-ui");
    assert!(
        web_ui.join("../node_modules/playwright-core").is_dir(),
        "needs `npm ci` at the repository root (scripts/build-web-ui.sh runs it)"
    );
    std::fs::create_dir_all(out).unwrap();
    for shot in shots {
        let _ = std::fs::remove_file(out.join(format!("{shot}.png")));
    }
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let mut command = Command::new("node");
    command
        .current_dir(&web_ui)
        .arg(format!("e2e/{script}"))
        .args(args)
        .env("CHROMIUM", &chromium)
        .envs(env.iter().copied());
    let stdout = run(command, Duration::from_secs(180), "the browser run failed")
        .await
        .stdout;
    assert!(stdout.contains(r#"{"done":true}"#), "{stdout}");
    for shot in shots {
        assert!(
            out.join(format!("{shot}.png")).is_file(),
            "screenshot {shot}"
        );
    }
    stdout
}

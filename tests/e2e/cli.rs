//! The `stead` binary's command line: version, layered configuration, and bad configuration
//! failing with one clear line.

use std::process::{Command, Output};

/// The binary without inherited configuration: tests control the layers themselves.
fn stead() -> Command {
    let mut cmd = stead_testkit::stead::command();
    cmd.env("RUST_BACKTRACE", "1");
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts a failed run that printed exactly one line on stderr containing every `needle`.
fn assert_one_line_failure(output: &Output, needles: &[&str]) {
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "must fail; stderr: {stderr}");
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line on stderr, got: {stderr}");
    assert!(lines[0].starts_with("stead: "), "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "`{needle}` not in: {stderr}");
    }
    for forbidden in ["panicked", "backtrace", "RUST_BACKTRACE", "internal error"] {
        assert!(!stderr.contains(forbidden), "`{forbidden}` in: {stderr}");
    }
}

fn dump(cmd: &mut Command) -> toml::Value {
    let output = cmd.arg("--dump-config").output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    toml::from_str(&text(&output.stdout)).expect("--dump-config prints TOML")
}

#[test]
fn version_names_the_package_version() {
    let output = stead().arg("--version").output().unwrap();
    assert!(output.status.success());
    assert_eq!(
        text(&output.stdout).trim(),
        format!("stead {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn built_in_defaults_give_a_working_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let config = dump(stead().current_dir(dir.path()));
    assert_eq!(config["server"]["listen"].as_str(), Some("127.0.0.1:8787"));
    assert_eq!(config["server"]["data_dir"].as_str(), Some(".stead"));
    assert_eq!(config["providers"][0]["kind"].as_str(), Some("onnx"));
    assert_eq!(config["routes"][0]["name"].as_str(), Some("default"));
    let agent = &config["agents"][0];
    assert_eq!(agent["route"].as_str(), Some("default"));
    let tools = agent["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .any(|t| t["approval"].as_str() == Some("always")),
        "the demo agent has a tool that needs approval"
    );
    assert!(
        config["database"].get("url").is_none(),
        "embedded SQLite by default"
    );
}

#[test]
fn layers_apply_in_order_file_env_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("custom.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = \"127.0.0.1:7001\"\ndata_dir = \"/tmp/from-file\"\n\
         [database]\nmax_event_bytes = 4096\n",
    )
    .unwrap();

    let from_file = dump(stead().arg("--config").arg(&file));
    assert_eq!(
        from_file["server"]["listen"].as_str(),
        Some("127.0.0.1:7001")
    );
    assert_eq!(
        from_file["database"]["max_event_bytes"].as_integer(),
        Some(4096)
    );

    // STEAD_CONFIG names the file too; env beats the file.
    let from_env = dump(
        stead()
            .env("STEAD_CONFIG", &file)
            .env("STEAD_LISTEN", "127.0.0.1:7002")
            .env("STEAD_DATABASE__MAX_EVENT_BYTES", "8192"),
    );
    assert_eq!(
        from_env["server"]["listen"].as_str(),
        Some("127.0.0.1:7002")
    );
    assert_eq!(
        from_env["server"]["data_dir"].as_str(),
        Some("/tmp/from-file")
    );
    assert_eq!(
        from_env["database"]["max_event_bytes"].as_integer(),
        Some(8192)
    );

    // Flags beat the environment.
    let from_flags = dump(
        stead()
            .env("STEAD_CONFIG", &file)
            .env("STEAD_LISTEN", "127.0.0.1:7002")
            .env("STEAD_DATA_DIR", "/tmp/from-env")
            .args(["--listen", "127.0.0.1:7003", "--data-dir", "/tmp/from-flag"]),
    );
    assert_eq!(
        from_flags["server"]["listen"].as_str(),
        Some("127.0.0.1:7003")
    );
    assert_eq!(
        from_flags["server"]["data_dir"].as_str(),
        Some("/tmp/from-flag")
    );
    // The local model follows the data dir.
    assert_eq!(
        from_flags["providers"][0]["model_dir"].as_str(),
        Some("/tmp/from-flag/models/qwen2.5-coder-0.5b-instruct")
    );
}

#[test]
fn dump_config_redacts_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stead.toml");
    let digest = format!("sha256:{}", "ab".repeat(32));
    std::fs::write(
        &file,
        format!("[server]\napi_keys = [\"plain-secret-key-123456\", \"{digest}\"]\n"),
    )
    .unwrap();
    let output = stead()
        .current_dir(dir.path())
        .env(
            "DATABASE_URL",
            "postgres://stead:hunter2@db.example:5432/stead",
        )
        .arg("--dump-config")
        .output()
        .unwrap();
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(!stdout.contains("plain-secret-key-123456"));
    assert!(!stdout.contains("hunter2"));
    assert!(stdout.contains(&digest), "digests are not secret");
    let config: toml::Value = toml::from_str(&stdout).unwrap();
    assert_eq!(
        config["database"]["url"].as_str(),
        Some("postgres://stead:***@db.example:5432/stead")
    );
}

#[test]
fn unknown_key_in_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stead.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = \"127.0.0.1:8787\"\nlisen_typo = 1\n",
    )
    .unwrap();
    let output = stead()
        .arg("--config")
        .arg(&file)
        .arg("serve")
        .output()
        .unwrap();
    assert_one_line_failure(&output, &["lisen_typo", "server"]);
}

#[test]
fn unknown_top_level_section_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stead.toml"), "[servr]\nlisten = \"x\"\n").unwrap();
    let output = stead()
        .current_dir(dir.path())
        .arg("migrate")
        .output()
        .unwrap();
    assert_one_line_failure(&output, &["servr"]);
}

#[test]
fn unknown_env_key_is_named() {
    let output = stead()
        .env("STEAD_DATABASE__MAX_EVENT_BYTE", "10")
        .arg("migrate")
        .output()
        .unwrap();
    assert_one_line_failure(&output, &["max_event_byte", "STEAD_"]);
}

#[test]
fn wrongly_typed_value_is_named() {
    let output = stead()
        .env("STEAD_DATABASE__MAX_EVENT_BYTES", "lots")
        .arg("migrate")
        .output()
        .unwrap();
    assert_one_line_failure(&output, &["max_event_bytes"]);
}

#[test]
fn missing_config_file_is_named() {
    let output = stead()
        .args(["--config", "/nonexistent/stead.toml", "serve"])
        .output()
        .unwrap();
    assert_one_line_failure(&output, &["/nonexistent/stead.toml"]);
}

#[test]
fn bad_database_url_is_named() {
    for (url, needle) in [
        ("mysql://root@127.0.0.1/stead", "mysql"),
        ("postgres://", "host"),
        ("sqlite://", "path"),
    ] {
        let output = stead()
            .env("DATABASE_URL", url)
            .arg("migrate")
            .output()
            .unwrap();
        assert_one_line_failure(&output, &["database.url", needle]);
    }
}

#[test]
fn unreachable_postgres_is_named_without_the_password() {
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    let output = stead()
        .env("DATABASE_URL", "postgres://stead:s3cret@127.0.0.1:1/stead")
        .arg("migrate")
        .output()
        .unwrap();
    assert_one_line_failure(&output, &["cannot connect to PostgreSQL", "127.0.0.1:1"]);
    assert!(!text(&output.stderr).contains("s3cret"));
}

#[test]
fn unwritable_data_dir_is_named() {
    // A path under a regular file can never be created, even by root.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let data_dir = file.join("data");
    let output = stead()
        .arg("--data-dir")
        .arg(&data_dir)
        .arg("serve")
        .output()
        .unwrap();
    assert_one_line_failure(
        &output,
        &["server.data_dir", &data_dir.display().to_string()],
    );
}

#[test]
fn bad_listen_address_is_named() {
    let output = stead()
        .args(["--listen", "localhost-ish", "serve"])
        .output()
        .unwrap();
    assert_one_line_failure(&output, &["server.listen", "localhost-ish"]);
}

#[test]
fn off_loopback_without_api_keys_refuses_to_start() {
    let output = stead()
        .args(["--listen", "0.0.0.0:8787", "serve"])
        .output()
        .unwrap();
    assert_one_line_failure(&output, &["server.listen", "api_keys"]);
}

#[test]
fn dangling_route_reference_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stead.toml");
    std::fs::write(&file, "[[agents]]\nname = \"ops\"\nroute = \"nowhere\"\n").unwrap();
    let output = stead()
        .arg("--config")
        .arg(&file)
        .arg("serve")
        .output()
        .unwrap();
    assert_one_line_failure(&output, &["agents[0].route", "nowhere"]);
}

#[test]
fn migrate_applies_once_then_reports_nothing_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        stead()
            .arg("--data-dir")
            .arg(dir.path())
            .arg("migrate")
            .output()
            .unwrap()
    };
    let first = run();
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(text(&first.stdout).contains("applied migration"));
    assert!(
        dir.path().join("stead.db").is_file(),
        "embedded SQLite in the data dir"
    );
    let second = run();
    assert!(second.status.success());
    let out = text(&second.stdout);
    assert!(!out.contains("applied migration"), "{out}");
    assert!(out.contains("0 migration(s) applied now"), "{out}");
}

#[test]
fn journal_benchmark_runs_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let output = stead()
        .arg("--data-dir")
        .arg(dir.path())
        .args([
            "bench",
            "journal",
            "--sessions",
            "4",
            "--events",
            "25",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let result: serde_json::Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(result["backend"], "sqlite");
    assert_eq!(result["steps"], 100);
    assert!(result["steps_per_sec"].as_f64().unwrap() > 0.0);
    assert!(result["p99_ms"].as_f64().unwrap() >= result["p50_ms"].as_f64().unwrap());
    assert!(text(&output.stderr).contains("progress:"), "shows progress");
    // The benchmark cleans up after itself.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("bench-"))
        .collect();
    assert!(left.is_empty(), "benchmark files left behind");
}

#[test]
fn cuda_without_the_cuda_build_fails_at_start_with_one_line() {
    // Needs the model prepared by `stead setup` (scripts/test.sh exports STEAD_DATA_DIR).
    let data = std::env::var("STEAD_DATA_DIR")
        .expect("needs STEAD_DATA_DIR prepared by `stead setup`; scripts/test.sh sets it");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stead.toml");
    std::fs::write(
        &file,
        format!(
            "[[providers]]\nname = \"local\"\nkind = \"onnx\"\nmodel_dir = \"{data}/models/smollm2-135m-instruct\"\nexecution_provider = \"cuda\"\n"
        ),
    )
    .unwrap();
    let output = stead()
        .arg("--config")
        .arg(&file)
        .args(["--data-dir", &data, "--listen", "127.0.0.1:0"])
        .env(
            "DATABASE_URL",
            format!("sqlite://{}/stead.db", dir.path().display()),
        )
        .arg("serve")
        .output()
        .unwrap();
    assert_one_line_failure(&output, &["providers[0]", "cuda"]);
}

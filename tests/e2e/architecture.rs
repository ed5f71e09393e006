//! The newcomer test: the README and docs/architecture.md name, for each concern, the folder and
//! files that own it; those must exist, and the folder names alone must lead to the owner of
//! the five concerns a newcomer asks about first. Also the one-way dependency rule that keeps
//! the HTTP edge and the router free of the local engine.

use std::path::Path;

fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The rows of the first Markdown table after `heading`: (first cell, second cell).
fn table_after(text: &str, heading: &str) -> Vec<(String, String)> {
    let section = text
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no `{heading}`"));
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[1].to_string(), cells[2].to_string())
        })
        .collect()
}

/// Every `path` in backticks in `cell` that looks like a repository path.
fn paths(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|p| p.contains('/') && !p.contains(' ') && !p.contains("::"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_path_the_maps_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = read("README.md");
    let architecture = read("docs/architecture.md");
    let mut checked = 0;
    for (_, owner) in table_after(&readme, "Where to look:")
        .into_iter()
        .chain(table_after(&architecture, "## Where things live"))
    {
        for path in paths(&owner) {
            assert!(root.join(&path).exists(), "{path} is named but missing");
            checked += 1;
        }
    }
    assert!(checked >= 20, "the maps name {checked} paths");
}

#[test]
fn a_newcomer_finds_each_owner_by_folder_name_from_the_readme() {
    let readme = read("README.md");
    let rows = table_after(&readme, "Where to look:");
    for (concern, folder) in [
        ("retries and fallback", "gateway/router/"),
        ("approval policy", "actors/"),
        ("journal append", "persistence/"),
        ("WebSocket resume", "edge/"),
        ("continuous batching", "inference/"),
    ] {
        let row = rows
            .iter()
            .find(|(c, _)| c.contains(concern))
            .unwrap_or_else(|| panic!("the README does not say who owns {concern}"));
        assert!(
            row.1.starts_with(&format!("`{folder}`")),
            "{concern}: the README says {}, expected {folder}",
            row.1
        );
    }
}

/// The engine and the router share one leaf vocabulary crate (`model/`) and neither links the
/// other; the vocabulary links no Stead crate at all.
#[test]
fn the_engine_does_not_link_the_router_and_the_vocabulary_is_a_leaf() {
    let depends = |manifest: &str, on: &str| {
        read(manifest)
            .lines()
            .any(|l| l.split(['.', ' ', '=']).next() == Some(on))
    };
    assert!(
        !depends("inference/Cargo.toml", "stead-router"),
        "the engine depends on the router"
    );
    assert!(depends("inference/Cargo.toml", "stead-model"));
    assert!(depends("gateway/router/Cargo.toml", "stead-model"));
    for other in [
        "stead-router",
        "stead-inference",
        "stead-actors",
        "stead-persistence",
        "stead-http",
    ] {
        assert!(
            !depends("model/Cargo.toml", other),
            "the vocabulary crate depends on {other}"
        );
    }
}

/// The binary's own `src/` is wiring: the command line, `stead serve`, cluster membership and
/// the operator commands that work on the store. Benchmarks, tools and configuration are
/// crates below it, so `src/` stays small enough to read in one sitting.
#[test]
fn the_binary_is_wiring_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    source_files(&root.join("src"), &["rs"], &mut files);
    let lines: usize = files
        .iter()
        .map(|path| std::fs::read_to_string(path).map_or(0, |text| text.lines().count()))
        .sum();
    assert!(files.len() >= 5, "only {} files under src/", files.len());
    assert!(
        lines < 6_000,
        "src/ holds {lines} lines; the wiring limit is 6,000"
    );
    for moved in [
        "src/bench",
        "src/eval",
        "src/knowledge",
        "src/mcp",
        "src/config",
    ] {
        let mut back = Vec::new();
        source_files(&root.join(moved), &["rs"], &mut back);
        assert!(back.is_empty(), "{moved} is back in the binary: {back:?}");
    }
}

/// The crates above the libraries stack one way: configuration, then agents (built from it),
/// then the benches (which build agents and servers), then the binary. Nothing below depends
/// on what is above it, and no library links the benches.
#[test]
fn configuration_agents_and_benches_stack_one_way() {
    let depends = |manifest: &str, on: &str| {
        read(manifest)
            .lines()
            .any(|l| l.split(['.', ' ', '=']).next() == Some(on))
    };
    assert!(depends("agents/Cargo.toml", "stead-config"));
    assert!(depends("bench/Cargo.toml", "stead-agents"));
    assert!(depends("Cargo.toml", "stead-bench"));
    for (manifest, above) in [
        (
            "config/Cargo.toml",
            &["stead-agents", "stead-bench", "stead"][..],
        ),
        (
            "agents/Cargo.toml",
            &["stead-bench", "stead", "stead-testkit"],
        ),
        ("bench/Cargo.toml", &["stead", "stead-testkit"]),
    ] {
        for &other in above {
            assert!(!depends(manifest, other), "{manifest} depends on {other}");
        }
    }
    for library in [
        "actors",
        "edge",
        "gateway/router",
        "inference",
        "model",
        "persistence",
    ] {
        let manifest = format!("{library}/Cargo.toml");
        for other in ["stead-config", "stead-agents", "stead-bench"] {
            assert!(!depends(&manifest, other), "{manifest} depends on {other}");
        }
    }
}

#[test]
fn the_http_edge_and_the_router_do_not_link_the_local_engine() {
    for manifest in ["edge/Cargo.toml", "gateway/router/Cargo.toml"] {
        let text = read(manifest);
        for forbidden in ["stead-inference", "ort", "tokenizers", "llguidance"] {
            assert!(
                !text
                    .lines()
                    .any(|l| l.split(['.', ' ', '=']).next() == Some(forbidden)),
                "{manifest} depends on {forbidden}"
            );
        }
    }
    let router = read("gateway/router/Cargo.toml");
    for other in ["stead-actors", "stead-persistence", "stead-http"] {
        assert!(!router.contains(other), "the router depends on {other}");
    }
}

/// Source files under `dir` with one of `extensions`, skipping dependencies, build outputs
/// and generated files.
fn source_files(dir: &Path, extensions: &[&str], found: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            let skipped = [
                "target",
                "node_modules",
                "dist",
                "generated",
                "test-results",
            ];
            if !name.starts_with('.') && !skipped.contains(&name.as_str()) {
                source_files(&path, extensions, found);
            }
            continue;
        }
        let source = extensions
            .iter()
            .any(|ext| name.ends_with(&format!(".{ext}")));
        if source && !name.ends_with(".d.ts") {
            found.push(path);
        }
    }
}

/// No source file grows past 600 lines (a file that long holds more than one responsibility:
/// split it by what each part owns). Generated files, dependencies and build outputs aside.
#[test]
fn no_source_file_is_over_600_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    source_files(root, &["rs", "py", "ts", "tsx", "sh", "mjs"], &mut files);
    assert!(files.len() > 100, "only {} source files found", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path)
                .map(|text| text.lines().count())
                .unwrap_or(0);
            (lines > 600).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over 600 lines: {long:#?}");
}

/// Comments say what the code does and why, not which issue asked for it (issues close; the
/// reasons belong in the comment itself, the history in `CHANGELOG.md`).
#[test]
fn no_comment_names_an_issue_number() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [
        "actors",
        "agents",
        "artifacts",
        "bench",
        "config",
        "edge",
        "gateway",
        "inference",
        "model",
        "persistence",
        "src",
        "tests",
    ] {
        source_files(&root.join(dir), &["rs"], &mut files);
    }
    assert!(files.len() > 100, "only {} Rust files found", files.len());
    let mut found = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let Some((_, comment)) = line.split_once("//") else {
                continue;
            };
            let lower = comment.to_lowercase();
            let names_one = lower.match_indices("issue ").any(|(at, _)| {
                lower[at + "issue ".len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit())
            });
            if names_one {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "comments naming an issue: {found:#?}");
}

/// The product's Rust files: every crate's `src/` (tests live elsewhere, or after a file's
/// `#[cfg(test)]` module header).
fn product_sources() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [
        "actors/src",
        "agents/src",
        "artifacts/src",
        "bench/src",
        "config/src",
        "edge/src",
        "gateway/router/src",
        "inference/src",
        "model/src",
        "persistence/src",
        "vectors/src",
        "src",
    ] {
        source_files(&root.join(dir), &["rs"], &mut files);
    }
    files
}

/// The error type of every `Result<T, E>` written in `text` whose `E` is a bare `String`.
fn string_errors(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("Result<") {
        let rest = &text[at + "Result<".len()..];
        let (mut depth, mut last_comma, mut end) = (0usize, None, None);
        for (i, c) in rest.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' if depth == 0 => {
                    end = Some(i);
                    break;
                }
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 0 => last_comma = Some(i),
                ';' | '{' => break,
                _ => {}
            }
        }
        if let (Some(comma), Some(end)) = (last_comma, end) {
            if rest[comma + 1..end].trim().trim_end_matches(',').trim() == "String" {
                found.push(format!("Result<{}>", &rest[..end]));
            }
        }
    }
    found
}

/// Errors carry a type, not a sentence: no `Result<_, String>` outside tests (a `thiserror`
/// enum or a named message type says what failed and keeps its cause).
#[test]
fn no_result_carries_a_bare_string_error_outside_tests() {
    assert_eq!(
        string_errors("fn f() -> Result<Vec<(u8, u8)>, String> { } Result<(), MyError>"),
        vec!["Result<Vec<(u8, u8)>, String>".to_string()],
        "the scanner itself"
    );
    let files = product_sources();
    assert!(files.len() > 100, "only {} Rust files found", files.len());
    let mut found = Vec::new();
    for path in files {
        if path.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        // A file's unit tests come last, after its `#[cfg(test)]` module header.
        let code = text.split("#[cfg(test)]\nmod").next().unwrap_or_default();
        for error in string_errors(code) {
            found.push(format!("{}: {error}", path.display()));
        }
    }
    assert!(found.is_empty(), "String errors outside tests: {found:#?}");
}

/// The non-test functions in `text` longer than `limit` lines: (name, first line, lines). A
/// function starts at a line `fn name` and ends at the `}` at its indentation.
fn long_functions(text: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let head = [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "async ",
            "const ",
            "unsafe ",
        ]
        .iter()
        .fold(trimmed, |rest, word| {
            rest.strip_prefix(word).unwrap_or(rest)
        });
        let head = head.strip_prefix("async ").unwrap_or(head);
        let Some(name) = head.strip_prefix("fn ") else {
            continue;
        };
        let name: String = name
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body opens on the signature's last line; a declaration ends with `;`.
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{}}}", " ".repeat(indent));
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j] == close) {
            if end - i + 1 > limit {
                found.push((name, i + 1, end - i + 1));
            }
        }
    }
    found
}

/// Functions stay short enough to read at once: none outside tests is over 150 lines. The
/// two reducers (`decide`, `SessionState::apply`) are dispatchers of one named method per
/// input or event, and fall under the same limit.
#[test]
fn no_function_outside_tests_is_over_150_lines() {
    let sample = format!(
        "fn short() {{\n}}\n    pub async fn long(\n    ) {{\n{}    }}\n",
        "x\n".repeat(160)
    );
    assert_eq!(
        long_functions(&sample, 150),
        vec![("long".to_string(), 3, 163)],
        "the scanner itself"
    );
    let files = product_sources();
    let mut found = Vec::new();
    for path in files {
        if path.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let code = text.split("#[cfg(test)]\nmod").next().unwrap_or_default();
        for (name, line, lines) in long_functions(code, 150) {
            found.push(format!("{}:{line}: {name} ({lines} lines)", path.display()));
        }
    }
    assert!(found.is_empty(), "functions over 150 lines: {found:#?}");
}

/// The edge answers with types: no handler returns `Json<Value>` (each body is a view type
/// of `edge/src/views.rs`, which is also its OpenAPI schema), and the REST handlers
/// build no JSON by hand. Named exceptions: `/openapi.json` (the document is JSON that
/// `utoipa` builds), and the OpenAI, Anthropic, Responses and embeddings compatibility
/// endpoints, whose bodies are the providers' formats passed through (they answer a
/// `Response`).
#[test]
fn no_handler_answers_untyped_json() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    source_files(&root.join("edge/src"), &["rs"], &mut files);
    assert!(files.len() > 20, "only {} edge files found", files.len());
    let mut found = Vec::new();
    for path in &files {
        let name = path
            .strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string();
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let code = text.split("#[cfg(test)]\nmod").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            let untyped = line.contains("Json<Value>") || line.contains("Json<serde_json::Value>");
            let input = line.contains("ApiJson<Value>");
            if untyped && !input && !name.ends_with("openapi.rs") {
                found.push(format!("{name}:{}: {}", n + 1, line.trim()));
            }
            if name.contains("/rest/") && line.contains("json!(") && !line.contains("json!({})") {
                found.push(format!("{name}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "untyped JSON answers: {found:#?}");
}

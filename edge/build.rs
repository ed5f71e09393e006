//! Embeds the built web UI (`web-ui/dist`, made by `npm run build` in `web-ui/`) into the
//! binary: a generated table of `(path, bytes)` that `webui.rs` serves at `/`. When the UI has
//! not been built, the table is empty and `/` says how to build it.

// A build script reports failure by panicking.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn files(dir: &Path, base: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, base, out);
        } else if path.extension().is_none_or(|e| e != "map") {
            let relative = path.strip_prefix(base).expect("under base");
            let name = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((name, path.canonicalize().expect("a file")));
        }
    }
}

fn main() {
    let dist = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"))
        .join("../web-ui/dist");
    println!("cargo:rerun-if-changed={}", dist.display());
    println!(
        "cargo:rerun-if-changed={}",
        dist.join("index.html").display()
    );
    println!("cargo:rerun-if-changed={}", dist.join("assets").display());
    let mut found = Vec::new();
    files(&dist, &dist, &mut found);
    found.sort();
    let mut code = String::from("pub static ASSETS: &[(&str, &[u8])] = &[\n");
    for (name, path) in &found {
        let _ = writeln!(
            code,
            "    ({name:?}, include_bytes!({:?})),",
            path.display().to_string()
        );
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("out dir")).join("webui_assets.rs");
    std::fs::write(out, code).expect("write the asset table");
}

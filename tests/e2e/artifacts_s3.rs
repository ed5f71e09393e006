//! The artifact store on a real S3-compatible server (moto's, from PyPI; docs/artifacts.md):
//! blobs put, read whole and by ranges, sized, deduplicated and deleted through the store; and
//! through the binary, uploads land in the bucket under the configured prefix, downloads and
//! ranges read them back, and a purge deletes the blob only the purged session named while
//! the shared one stays.

use serde_json::Value;
use stead_artifacts::{ArtifactError, BlobConfig, BlobStore};
use stead_testkit::client::Api;
use stead_testkit::s3::S3Server;
use stead_testkit::stead::Stead;

fn s3_config(server: &S3Server, prefix: &str) -> BlobConfig {
    for (name, value) in S3Server::ENV {
        // Read by BlobStore::open: names of this test's own, so no other test sees them.
        std::env::set_var(name, value);
    }
    BlobConfig::S3 {
        bucket: server.bucket.clone(),
        endpoint: Some(server.endpoint.clone()),
        region: "us-east-1".into(),
        prefix: prefix.into(),
        access_key_env: "S3_TEST_KEY".into(),
        secret_key_env: "S3_TEST_SECRET".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_live_in_an_s3_bucket() {
    let server = S3Server::start("blobs").await;
    let store = BlobStore::open(&s3_config(&server, "stead/artifacts")).unwrap();
    let bytes = axum::body::Bytes::from_static(b"the quick brown fox jumps over the lazy dog");
    let stored = store.put(bytes.clone()).await.unwrap();
    assert_eq!(stored.size, 43);
    assert_eq!(
        stored.sha256,
        "05c6e08f1d9fdafa03147fcb8f82f124c76d2f70e3d989dc8aadb5e7d7450bec"
    );
    // The same bytes again: the same blob.
    assert_eq!(store.put(bytes.clone()).await.unwrap(), stored);
    assert_eq!(store.get(&stored.sha256, None).await.unwrap(), bytes);
    assert_eq!(
        store.get(&stored.sha256, Some(4..9)).await.unwrap(),
        bytes.slice(4..9)
    );
    assert_eq!(store.size(&stored.sha256).await.unwrap(), 43);
    store.delete(&stored.sha256).await.unwrap();
    assert!(matches!(
        store.get(&stored.sha256, None).await,
        Err(ArtifactError::NotFound(_))
    ));
    assert!(matches!(
        store.get("not-a-digest", None).await,
        Err(ArtifactError::BadDigest(_))
    ));
}

async fn upload(stead: &Stead, session: &str, body: &[u8]) -> Value {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/artifacts?session_id={session}", stead.base))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_keeps_artifacts_in_an_s3_bucket_and_purges_them() {
    let s3 = S3Server::start("stead").await;
    let config = format!("[artifacts]\nstore = {}\n", s3.store_toml("uploads"));
    let data = tempfile::tempdir().unwrap();
    let stead = Stead::start_with_env(data, &config, None, &S3Server::ENV);
    let store = BlobStore::open(&s3_config(&s3, "uploads")).unwrap();
    let (id, _) = stead.create("demo").await;
    let (other, _) = stead.create("demo").await;

    let own = upload(&stead, &id, b"only in the first session").await;
    let shared = upload(&stead, &id, b"in both sessions").await;
    upload(&stead, &other, b"in both sessions").await;
    let own_sha = own["sha256"].as_str().unwrap();
    let shared_sha = shared["sha256"].as_str().unwrap();
    // In the bucket, under the prefix (read back through a store of the same bucket).
    assert_eq!(store.size(own_sha).await.unwrap(), 25);
    let client = reqwest::Client::new();
    let url = format!(
        "{}/v1/artifacts/{}",
        stead.base,
        own["id"].as_str().unwrap()
    );
    let whole = client.get(&url).send().await.unwrap();
    assert_eq!(
        whole.bytes().await.unwrap().as_ref(),
        b"only in the first session"
    );
    let part = client
        .get(&url)
        .header("range", "bytes=5-6")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status().as_u16(), 206);
    assert_eq!(part.bytes().await.unwrap().as_ref(), b"in");

    let (status, purged) = stead
        .call("DELETE", &format!("/v1/sessions/{id}?purge=true"), None)
        .await;
    assert_eq!(status, 200, "{purged}");
    assert_eq!(purged["artifacts"], 2);
    assert!(matches!(
        store.size(own_sha).await,
        Err(ArtifactError::NotFound(_))
    ));
    assert_eq!(store.size(shared_sha).await.unwrap(), 16);
}

//! The blob store on the filesystem (an S3-compatible server is exercised end to end) and the
//! content types sniffed from bytes.

use super::*;

fn store() -> (tempfile::TempDir, BlobStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(&BlobConfig::Filesystem {
        path: dir.path().join("blobs"),
    })
    .unwrap();
    (dir, store)
}

#[tokio::test]
async fn blobs_are_content_addressed_ranged_and_deleted() {
    let (dir, store) = store();
    let bytes = Bytes::from_static(b"hello, artifacts");
    let stored = store.put(bytes.clone()).await.unwrap();
    assert_eq!(
        stored,
        Stored {
            // `printf 'hello, artifacts' | sha256sum`
            sha256: "332d2398f1e603bc68e783600e0108c6b433c0264ed3d21e0b20e812c9bef3fd".into(),
            size: 16
        }
    );
    // The same bytes again are the same blob.
    assert_eq!(store.put(bytes.clone()).await.unwrap(), stored);
    let file = dir
        .path()
        .join("blobs")
        .join(&stored.sha256[..2])
        .join(&stored.sha256[2..]);
    assert_eq!(std::fs::read(&file).unwrap(), bytes);

    assert_eq!(store.get(&stored.sha256, None).await.unwrap(), bytes);
    assert_eq!(
        store.get(&stored.sha256, Some(7..16)).await.unwrap(),
        Bytes::from_static(b"artifacts")
    );
    assert_eq!(store.size(&stored.sha256).await.unwrap(), 16);
    assert!(matches!(
        store.get(&stored.sha256, Some(10..17)).await,
        Err(ArtifactError::Range {
            start: 10,
            end: 17,
            size: 16
        })
    ));

    store.delete(&stored.sha256).await.unwrap();
    store.delete(&stored.sha256).await.unwrap();
    assert!(matches!(
        store.get(&stored.sha256, None).await,
        Err(ArtifactError::NotFound(_))
    ));
    assert!(!file.exists());
}

#[tokio::test]
async fn a_name_that_is_not_a_digest_is_refused() {
    let (_dir, store) = store();
    for bad in ["../../etc/passwd", "abc", &"g".repeat(64)] {
        assert!(
            matches!(store.get(bad, None).await, Err(ArtifactError::BadDigest(_))),
            "{bad}"
        );
    }
}

#[test]
fn the_bytes_decide_the_type_not_the_client() {
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    assert_eq!(content_type(Some("text/html"), png), "image/png");
    assert_eq!(
        content_type(None, b"\xff\xd8\xff\xe0\0\x10JFIF"),
        "image/jpeg"
    );
    assert_eq!(content_type(None, b"GIF89a\x01\0"), "image/gif");
    assert_eq!(content_type(None, b"RIFF\x24\0\0\0WEBPVP8 "), "image/webp");
    assert_eq!(
        content_type(Some("image/png"), b"RIFF\x24\0\0\0WAVEfmt "),
        "audio/wav"
    );
    assert_eq!(content_type(None, b"OggS\0\x02"), "audio/ogg");
    assert_eq!(content_type(None, b"ID3\x04\0"), "audio/mpeg");
    assert_eq!(content_type(None, b"\xff\xfb\x90\x64"), "audio/mpeg");
    assert_eq!(content_type(None, b"%PDF-1.7\n"), "application/pdf");
    assert_eq!(content_type(None, b"\0\0\0\x20ftypM4A \0"), "audio/mp4");
    // A declared type narrows a container the bytes show, and nothing else.
    let webm = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81";
    assert_eq!(
        content_type(Some("audio/webm;codecs=opus"), webm),
        "audio/webm"
    );
    assert_eq!(content_type(Some("image/png"), webm), "video/webm");
    // Bytes without a signature: text, or octets.
    assert_eq!(
        content_type(Some("text/html"), b"<script>x</script>"),
        TEXT_PLAIN
    );
    assert_eq!(
        content_type(Some("application/json"), b"{\"a\": 1}"),
        "application/json"
    );
    assert_eq!(
        content_type(Some("application/json"), b"not json"),
        TEXT_PLAIN
    );
    assert_eq!(
        content_type(Some("text/markdown"), "# Title".as_bytes()),
        "text/markdown; charset=utf-8"
    );
    assert_eq!(content_type(None, b"a\0b"), "application/octet-stream");
    assert_eq!(content_type(None, b"\xc3\x28"), "application/octet-stream");
}

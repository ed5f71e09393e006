//! Knowledge collections on both backends: create is idempotent by name and route, a put
//! replaces a document's chunks atomically (concurrent readers never see a mix), an unchanged
//! put writes nothing, counts and versions follow every write, a model mismatch and a stale
//! re-embed are refused with nothing written, and deleting a collection takes its documents.

use stead_persistence::{
    CollectionKey, NewChunk, PutDocument, PutOutcome, Reembedding, DEFAULT_PROJECT,
};

use super::*;

stead_testkit::both_backends!(
    collections_documents_and_chunks_round_trip,
    a_replaced_document_is_never_seen_half_written,
    model_mismatch_and_stale_reembeds_are_refused,
    one_name_in_two_projects_is_two_collections,
);

/// The default project's collection `name`.
fn k(name: &str) -> CollectionKey {
    CollectionKey::new(DEFAULT_PROJECT, name)
}

fn put(collection: &str, id: &str, texts: &[&str], model: &str, dim: usize) -> PutDocument {
    let text = texts.join(" ");
    PutDocument {
        collection: k(collection),
        id: id.into(),
        sha256: format!("sha-of-{text}"),
        text,
        metadata: json!({ "source": id }),
        model: model.into(),
        chunks: texts
            .iter()
            .enumerate()
            .map(|(i, t)| NewChunk {
                text: (*t).into(),
                embedding: (0..dim).map(|d| (i * dim + d) as f32 / 10.0).collect(),
            })
            .collect(),
    }
}

async fn collections_documents_and_chunks_round_trip(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    let (created, new) = store.create_collection(&k("docs"), "embed").await.unwrap();
    assert!(new);
    assert_eq!(
        (created.model.clone(), created.dimension, created.documents),
        (None, None, 0)
    );
    let (again, new) = store.create_collection(&k("docs"), "embed").await.unwrap();
    assert!(!new);
    assert_eq!(again, created);
    assert!(matches!(
        store.create_collection(&k("docs"), "other").await,
        Err(Error::Exists(_))
    ));

    let first = store
        .put_document(put("docs", "a", &["one", "two"], "minilm", 3))
        .await
        .unwrap();
    assert!(matches!(first, PutOutcome::Created(_)), "{first:?}");
    assert_eq!(first.document().chunks, 2);
    assert_eq!(first.document().bytes, "one two".len() as i64);
    // The same text and metadata: nothing written, the version stays.
    let before = store.get_collection(&k("docs")).await.unwrap();
    let same = store
        .put_document(put("docs", "a", &["one", "two"], "minilm", 3))
        .await
        .unwrap();
    assert!(matches!(same, PutOutcome::Unchanged(_)), "{same:?}");
    assert_eq!(store.get_collection(&k("docs")).await.unwrap(), before);
    // Replaced by a document of three chunks; another document beside it.
    let replaced = store
        .put_document(put("docs", "a", &["x", "y", "z"], "minilm", 3))
        .await
        .unwrap();
    assert!(matches!(replaced, PutOutcome::Replaced(_)), "{replaced:?}");
    assert_eq!(replaced.document().created_at, first.document().created_at);
    store
        .put_document(put("docs", "b", &["bee"], "minilm", 3))
        .await
        .unwrap();
    let row = store.get_collection(&k("docs")).await.unwrap();
    assert_eq!(
        (
            row.model.as_deref(),
            row.dimension,
            row.documents,
            row.chunks
        ),
        (Some("minilm"), Some(3), 2, 4)
    );
    assert!(row.version > before.version);

    let (doc, text, chunks) = store.get_document(&k("docs"), "a").await.unwrap();
    assert_eq!(
        (doc.id.as_str(), text.as_str(), chunks),
        ("a", "x y z", vec!["x".to_string(), "y".into(), "z".into()])
    );
    assert_eq!(doc.metadata, json!({ "source": "a" }));
    let all = store.collection_chunks(&k("docs")).await.unwrap();
    let seen: Vec<(String, i64, String, Vec<f32>)> = all
        .chunks
        .iter()
        .map(|c| {
            (
                c.document_id.clone(),
                c.chunk_index,
                c.text.clone(),
                c.embedding.clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("a".into(), 0, "x".into(), vec![0.0, 0.1, 0.2]),
            ("a".into(), 1, "y".into(), vec![0.3, 0.4, 0.5]),
            ("a".into(), 2, "z".into(), vec![0.6, 0.7, 0.8]),
            ("b".into(), 0, "bee".into(), vec![0.0, 0.1, 0.2]),
        ]
    );
    assert_eq!(all.collection.version, row.version);

    // Paging by id.
    let page = store.list_documents(&k("docs"), None, 1).await.unwrap();
    assert_eq!(
        page.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    let page = store
        .list_documents(&k("docs"), Some("a"), 10)
        .await
        .unwrap();
    assert_eq!(
        page.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["b"]
    );

    // Deleting a document, then the collection with the rest.
    assert!(store.delete_document(&k("docs"), "a").await.unwrap());
    assert!(!store.delete_document(&k("docs"), "a").await.unwrap());
    let row = store.get_collection(&k("docs")).await.unwrap();
    assert_eq!((row.documents, row.chunks), (1, 1));
    assert!(matches!(
        store.get_document(&k("docs"), "a").await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.delete_document(&k("nope"), "a").await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.put_document(put("nope", "a", &["x"], "m", 3)).await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(
        store.list_collections(DEFAULT_PROJECT).await.unwrap().len(),
        1
    );
    assert!(store.delete_collection(&k("docs")).await.unwrap());
    assert!(!store.delete_collection(&k("docs")).await.unwrap());
    assert!(store
        .list_collections(DEFAULT_PROJECT)
        .await
        .unwrap()
        .is_empty());
    assert!(matches!(
        store.get_collection(&k("docs")).await,
        Err(Error::NotFound(_))
    ));
    // Its documents went with it: a new collection of that name is empty.
    store.create_collection(&k("docs"), "embed").await.unwrap();
    assert!(store
        .collection_chunks(&k("docs"))
        .await
        .unwrap()
        .chunks
        .is_empty());
}

async fn a_replaced_document_is_never_seen_half_written(backend: Backend) {
    let t = db::open(backend).await;
    let store = t.store.clone();
    store.create_collection(&k("c"), "embed").await.unwrap();
    // A writer flips one document between two versions of 50 chunks each ("old i" / "new i");
    // a reader must always see 50 chunks, all of one version.
    let old: Vec<String> = (0..50).map(|i| format!("old {i}")).collect();
    let new: Vec<String> = (0..50).map(|i| format!("new {i}")).collect();
    let as_refs = |v: &Vec<String>| {
        v.iter()
            .map(String::as_str)
            .collect::<Vec<&str>>()
            .join("|")
    };
    let (old_text, new_text) = (as_refs(&old), as_refs(&new));
    let version = |text: &str| {
        let texts: Vec<&str> = text.split('|').collect();
        put("c", "doc", &texts, "m", 4)
    };
    store.put_document(version(&old_text)).await.unwrap();
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for round in 0..20 {
                let text = if round % 2 == 0 { &new_text } else { &old_text };
                store.put_document(version(text)).await.unwrap();
            }
        })
    };
    let mut reads = 0;
    while !writer.is_finished() || reads < 5 {
        let chunks = store.collection_chunks(&k("c")).await.unwrap().chunks;
        assert_eq!(chunks.len(), 50);
        let prefix = chunks[0].text.split(' ').next().unwrap().to_string();
        assert!(
            chunks.iter().all(|c| c.text.starts_with(&prefix)),
            "a mix of versions: {:?}",
            chunks.iter().map(|c| &c.text).collect::<Vec<_>>()
        );
        let (_, _, texts) = store.get_document(&k("c"), "doc").await.unwrap();
        assert_eq!(texts.len(), 50);
        reads += 1;
    }
    writer.await.unwrap();
    let row = store.get_collection(&k("c")).await.unwrap();
    assert_eq!((row.documents, row.chunks), (1, 50));
}

async fn model_mismatch_and_stale_reembeds_are_refused(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    store.create_collection(&k("c"), "embed").await.unwrap();
    store
        .put_document(put("c", "a", &["one", "two"], "m1", 3))
        .await
        .unwrap();
    let before = store.get_collection(&k("c")).await.unwrap();
    // Another model, or another dimension: refused, nothing written.
    for (model, dim) in [("m2", 3), ("m1", 4)] {
        assert!(matches!(
            store
                .put_document(put("c", "b", &["bee"], model, dim))
                .await,
            Err(Error::Mismatch(_))
        ));
    }
    assert_eq!(store.get_collection(&k("c")).await.unwrap(), before);

    // A re-embed from a stale version is refused; from the current one it replaces every
    // vector and the model.
    let embeddings = vec![
        ("a".to_string(), 0, vec![1.0, 0.0]),
        ("a".to_string(), 1, vec![0.0, 1.0]),
    ];
    let stale = Reembedding {
        collection: k("c"),
        from_version: before.version - 1,
        embedding_route: "embed2".into(),
        model: "m2".into(),
        embeddings: embeddings.clone(),
    };
    assert!(matches!(
        store.reembed_collection(stale).await,
        Err(Error::Stale(_))
    ));
    // Missing a chunk: refused too.
    let partial = Reembedding {
        collection: k("c"),
        from_version: before.version,
        embedding_route: "embed2".into(),
        model: "m2".into(),
        embeddings: embeddings[..1].to_vec(),
    };
    assert!(matches!(
        store.reembed_collection(partial).await,
        Err(Error::Stale(_))
    ));
    assert_eq!(store.get_collection(&k("c")).await.unwrap(), before);
    store
        .reembed_collection(Reembedding {
            collection: k("c"),
            from_version: before.version,
            embedding_route: "embed2".into(),
            model: "m2".into(),
            embeddings,
        })
        .await
        .unwrap();
    let after = store.collection_chunks(&k("c")).await.unwrap();
    assert_eq!(
        (
            after.collection.model.as_deref(),
            after.collection.dimension
        ),
        (Some("m2"), Some(2))
    );
    assert_eq!(after.collection.embedding_route, "embed2");
    assert_eq!(
        after
            .chunks
            .iter()
            .map(|c| c.embedding.clone())
            .collect::<Vec<_>>(),
        vec![vec![1.0, 0.0], vec![0.0, 1.0]]
    );
    // Now m2 documents fit.
    store
        .put_document(put("c", "b", &["bee"], "m2", 2))
        .await
        .unwrap();
}

/// Names are unique within a project: two projects' `docs` are two collections, each with its
/// own documents, counts and version; one's deletion leaves the other.
async fn one_name_in_two_projects_is_two_collections(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    let other = uuid::Uuid::now_v7();
    let theirs = CollectionKey::new(other, "docs");
    assert!(
        store
            .create_collection(&k("docs"), "embed")
            .await
            .unwrap()
            .1
    );
    assert!(store.create_collection(&theirs, "other").await.unwrap().1);
    store
        .put_document(put("docs", "a", &["ours"], "minilm", 3))
        .await
        .unwrap();
    let mut their_put = put("docs", "a", &["theirs", "too"], "e5", 2);
    their_put.collection = theirs.clone();
    store.put_document(their_put).await.unwrap();

    let ours = store.collection_chunks(&k("docs")).await.unwrap();
    assert_eq!(
        ours.chunks
            .iter()
            .map(|c| c.text.as_str())
            .collect::<Vec<_>>(),
        vec!["ours"]
    );
    assert_eq!(
        (ours.collection.project_id, ours.collection.chunks),
        (DEFAULT_PROJECT, 1)
    );
    let their_row = store.get_collection(&theirs).await.unwrap();
    assert_eq!(
        (
            their_row.project_id,
            their_row.embedding_route.as_str(),
            their_row.chunks
        ),
        (other, "other", 2)
    );
    assert_eq!(
        store
            .list_collections(other)
            .await
            .unwrap()
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        vec!["docs"]
    );
    assert_eq!(
        store.get_document(&theirs, "a").await.unwrap().1,
        "theirs too"
    );

    assert!(store.delete_collection(&theirs).await.unwrap());
    assert!(matches!(
        store.get_collection(&theirs).await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(store.get_collection(&k("docs")).await.unwrap().documents, 1);
    assert_eq!(store.get_document(&k("docs"), "a").await.unwrap().1, "ours");
}

-- Knowledge collections belong to projects (docs/tenancy.md): their
-- names are unique within a project, so every key that named a collection now names its
-- project too. SQLite cannot change a primary key in place: the tables are built
-- again and their rows copied (children dropped before parents, so that no ON DELETE CASCADE
-- runs). Every existing row is the default project's (the nil id). Not additive: a node from
-- before this migration cannot write knowledge into the migrated database
-- (CHANGELOG.md).
CREATE TABLE knowledge_collections_v2 (
    project_id      TEXT    NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    name            TEXT    NOT NULL,
    embedding_route TEXT    NOT NULL,
    model           TEXT,
    dimension       INTEGER,
    documents       INTEGER NOT NULL DEFAULT 0,
    chunks          INTEGER NOT NULL DEFAULT 0,
    version         INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (project_id, name)
);

CREATE TABLE knowledge_documents_v2 (
    project_id TEXT    NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    collection TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    body       TEXT    NOT NULL,
    metadata   TEXT    NOT NULL,
    sha256     TEXT    NOT NULL,
    bytes      INTEGER NOT NULL,
    chunks     INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, collection, id),
    FOREIGN KEY (project_id, collection) REFERENCES knowledge_collections_v2 (project_id, name)
        ON DELETE CASCADE
);

CREATE TABLE knowledge_chunks_v2 (
    project_id  TEXT    NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    collection  TEXT    NOT NULL,
    document_id TEXT    NOT NULL,
    chunk_index INTEGER NOT NULL,
    body        TEXT    NOT NULL,
    embedding   BLOB    NOT NULL,
    PRIMARY KEY (project_id, collection, document_id, chunk_index),
    FOREIGN KEY (project_id, collection, document_id)
        REFERENCES knowledge_documents_v2 (project_id, collection, id) ON DELETE CASCADE
);

INSERT INTO knowledge_collections_v2
    (project_id, name, embedding_route, model, dimension, documents, chunks, version,
     created_at, updated_at)
SELECT project_id, name, embedding_route, model, dimension, documents, chunks, version,
       created_at, updated_at
FROM knowledge_collections;

INSERT INTO knowledge_documents_v2
    (project_id, collection, id, body, metadata, sha256, bytes, chunks, created_at, updated_at)
SELECT c.project_id, d.collection, d.id, d.body, d.metadata, d.sha256, d.bytes, d.chunks,
       d.created_at, d.updated_at
FROM knowledge_documents d JOIN knowledge_collections c ON c.name = d.collection;

INSERT INTO knowledge_chunks_v2
    (project_id, collection, document_id, chunk_index, body, embedding)
SELECT c.project_id, k.collection, k.document_id, k.chunk_index, k.body, k.embedding
FROM knowledge_chunks k JOIN knowledge_collections c ON c.name = k.collection;

DROP TABLE knowledge_chunks;
DROP TABLE knowledge_documents;
DROP TABLE knowledge_collections;
ALTER TABLE knowledge_collections_v2 RENAME TO knowledge_collections;
ALTER TABLE knowledge_documents_v2 RENAME TO knowledge_documents;
ALTER TABLE knowledge_chunks_v2 RENAME TO knowledge_chunks;

-- Knowledge (issue 21, docs/knowledge.md): named collections of documents, each document cut
-- into chunks with one embedding each (little-endian float32 values). Times are microseconds
-- since the epoch. Search runs over an in-memory index rebuilt when `version` moves.
CREATE TABLE knowledge_collections (
    name            TEXT    PRIMARY KEY,
    embedding_route TEXT    NOT NULL,
    model           TEXT,
    dimension       INTEGER,
    documents       INTEGER NOT NULL DEFAULT 0,
    chunks          INTEGER NOT NULL DEFAULT 0,
    version         INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

CREATE TABLE knowledge_documents (
    collection TEXT    NOT NULL REFERENCES knowledge_collections (name) ON DELETE CASCADE,
    id         TEXT    NOT NULL,
    body       TEXT    NOT NULL,
    metadata   TEXT    NOT NULL,
    sha256     TEXT    NOT NULL,
    bytes      INTEGER NOT NULL,
    chunks     INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (collection, id)
);

CREATE TABLE knowledge_chunks (
    collection  TEXT    NOT NULL,
    document_id TEXT    NOT NULL,
    chunk_index INTEGER NOT NULL,
    body        TEXT    NOT NULL,
    embedding   BLOB    NOT NULL,
    PRIMARY KEY (collection, document_id, chunk_index),
    FOREIGN KEY (collection, document_id) REFERENCES knowledge_documents (collection, id)
        ON DELETE CASCADE
);

-- Knowledge (issue 21, docs/knowledge.md): named collections of documents, each document cut
-- into chunks with one embedding each. A chunk's embedding is its little-endian float32 values
-- (`bytea`): this server may lack pgvector, and search runs over an in-memory index that each
-- node rebuilds when the collection's `version` moves. Additive: older nodes ignore the tables.
CREATE TABLE knowledge_collections (
    name            text        PRIMARY KEY,
    embedding_route text        NOT NULL,
    -- The model that made the collection's embeddings and their dimension (NULL while empty).
    model           text,
    dimension       bigint,
    documents       bigint      NOT NULL DEFAULT 0,
    chunks          bigint      NOT NULL DEFAULT 0,
    -- Moves on every change of the collection's documents (a node's cached index is stale).
    version         bigint      NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

CREATE TABLE knowledge_documents (
    collection text        NOT NULL REFERENCES knowledge_collections (name) ON DELETE CASCADE,
    id         text        NOT NULL,
    body       text        NOT NULL,
    metadata   jsonb       NOT NULL,
    sha256     text        NOT NULL,
    bytes      bigint      NOT NULL,
    chunks     bigint      NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (collection, id)
);

CREATE TABLE knowledge_chunks (
    collection  text    NOT NULL,
    document_id text    NOT NULL,
    chunk_index bigint  NOT NULL,
    body        text    NOT NULL,
    embedding   bytea   NOT NULL,
    PRIMARY KEY (collection, document_id, chunk_index),
    FOREIGN KEY (collection, document_id) REFERENCES knowledge_documents (collection, id)
        ON DELETE CASCADE
);

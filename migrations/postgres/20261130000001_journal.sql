-- Sessions, their write-ahead journal, snapshots of folded state and durable key-value storage.

CREATE TABLE sessions (
    id          uuid PRIMARY KEY,
    agent       text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('idle', 'running', 'awaiting_approval', 'failed', 'closed')),
    metadata    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- Seq of the last journal event; the fencing token of `append` (0 = empty journal).
    last_seq    bigint      NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    closed_at   timestamptz
);

CREATE INDEX sessions_newest ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_agent_newest ON sessions (agent, created_at DESC, id DESC);
CREATE INDEX sessions_status_newest ON sessions (status, created_at DESC, id DESC);

CREATE TABLE journal (
    session_id  uuid        NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq         bigint      NOT NULL CHECK (seq >= 1),
    kind        text        NOT NULL,
    payload     jsonb       NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE snapshots (
    session_id  uuid        PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    seq         bigint      NOT NULL CHECK (seq >= 0),
    state       jsonb       NOT NULL,
    created_at  timestamptz NOT NULL
);

CREATE TABLE kv (
    session_id  uuid        NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    key         text        NOT NULL,
    value       jsonb       NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (session_id, key)
);

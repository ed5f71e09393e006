-- Sessions, their write-ahead journal, snapshots of folded state and durable key-value storage.
-- Ids are hyphenated UUID text, times are Unix microseconds, JSON is text.

CREATE TABLE sessions (
    id          TEXT    PRIMARY KEY NOT NULL,
    agent       TEXT    NOT NULL,
    status      TEXT    NOT NULL CHECK (status IN ('idle', 'running', 'awaiting_approval', 'failed', 'closed')),
    metadata    TEXT    NOT NULL DEFAULT '{}',
    -- Seq of the last journal event; the fencing token of `append` (0 = empty journal).
    last_seq    INTEGER NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    closed_at   INTEGER
);

CREATE INDEX sessions_newest ON sessions (created_at DESC, id DESC);
CREATE INDEX sessions_agent_newest ON sessions (agent, created_at DESC, id DESC);
CREATE INDEX sessions_status_newest ON sessions (status, created_at DESC, id DESC);

CREATE TABLE journal (
    session_id  TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    kind        TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

CREATE TABLE snapshots (
    session_id  TEXT    PRIMARY KEY NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    state       TEXT    NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE kv (
    session_id  TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    key         TEXT    NOT NULL,
    value       TEXT    NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;

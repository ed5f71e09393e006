-- The model router's request log (one row per model call); `id` is a time-ordered UUID (v7),
-- so it is also the newest-first cursor. Times are Unix microseconds, JSON is text.
CREATE TABLE request_log (
    id          TEXT    PRIMARY KEY NOT NULL,
    at          INTEGER NOT NULL,
    session_id  TEXT,
    api_key     TEXT,
    route       TEXT    NOT NULL,
    provider    TEXT,
    model       TEXT,
    status      TEXT    NOT NULL,
    attempts    TEXT    NOT NULL DEFAULT '[]',
    latency_ms  REAL    NOT NULL,
    ttft_ms     REAL,
    tokens_in   INTEGER NOT NULL DEFAULT 0,
    tokens_out  INTEGER NOT NULL DEFAULT 0,
    cost        REAL    NOT NULL DEFAULT 0,
    cache_hit   INTEGER NOT NULL DEFAULT 0,
    stream      INTEGER NOT NULL DEFAULT 0,
    metadata    TEXT    NOT NULL DEFAULT '{}',
    error       TEXT
);

CREATE INDEX request_log_at ON request_log (at);
CREATE INDEX request_log_route ON request_log (route, id DESC);
CREATE INDEX request_log_session ON request_log (session_id, id DESC) WHERE session_id IS NOT NULL;

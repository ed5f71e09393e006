-- The model router's request log (one row per model call); `id` is a time-ordered UUID (v7),
-- so it is also the newest-first cursor.
CREATE TABLE request_log (
    id          uuid             PRIMARY KEY,
    at          timestamptz      NOT NULL,
    session_id  uuid,
    api_key     text,
    route       text             NOT NULL,
    provider    text,
    model       text,
    status      text             NOT NULL,
    attempts    jsonb            NOT NULL DEFAULT '[]'::jsonb,
    latency_ms  double precision NOT NULL,
    ttft_ms     double precision,
    tokens_in   bigint           NOT NULL DEFAULT 0,
    tokens_out  bigint           NOT NULL DEFAULT 0,
    cost        double precision NOT NULL DEFAULT 0,
    cache_hit   boolean          NOT NULL DEFAULT false,
    stream      boolean          NOT NULL DEFAULT false,
    metadata    jsonb            NOT NULL DEFAULT '{}'::jsonb,
    error       text
);

CREATE INDEX request_log_at ON request_log (at);
CREATE INDEX request_log_route ON request_log (route, id DESC);
CREATE INDEX request_log_session ON request_log (session_id, id DESC) WHERE session_id IS NOT NULL;

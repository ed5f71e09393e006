-- Artifacts (docs/artifacts.md): one row per upload. The bytes are a content-addressed blob
-- in the artifact store, named by `sha256` and shared by every row of the same bytes.
CREATE TABLE artifacts (
    id           uuid        PRIMARY KEY,
    sha256       text        NOT NULL,
    size         bigint      NOT NULL,
    content_type text        NOT NULL,
    session_id   uuid,
    project_id   uuid        NOT NULL,
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL
);

CREATE INDEX artifacts_session ON artifacts (session_id) WHERE session_id IS NOT NULL;
CREATE INDEX artifacts_sha256 ON artifacts (sha256);

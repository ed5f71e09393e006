-- Artifacts (docs/artifacts.md): one row per upload. The bytes are a content-addressed blob
-- in the artifact store, named by `sha256` and shared by every row of the same bytes.
CREATE TABLE artifacts (
    id           TEXT    PRIMARY KEY NOT NULL,
    sha256       TEXT    NOT NULL,
    size         INTEGER NOT NULL,
    content_type TEXT    NOT NULL,
    session_id   TEXT,
    project_id   TEXT    NOT NULL,
    created_by   TEXT    NOT NULL,
    created_at   INTEGER NOT NULL
);

CREATE INDEX artifacts_session ON artifacts (session_id) WHERE session_id IS NOT NULL;
CREATE INDEX artifacts_sha256 ON artifacts (sha256);

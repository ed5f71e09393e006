-- Projects (docs/design/tenancy-notes.md, step 1): every resource belongs to exactly one
-- project. The default project (the nil id) holds everything that existed before, and the
-- columns default to it, so rows written by older nodes land there too. Scoping by project is
-- built on these columns; until then every row is the default project's. Times are
-- microseconds since the epoch. Additive.
CREATE TABLE projects (
    id         TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE,
    settings   TEXT    NOT NULL DEFAULT '{}',
    created_at INTEGER NOT NULL
);

INSERT INTO projects (id, name, created_at)
VALUES ('00000000-0000-0000-0000-000000000000', 'default',
        CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));

ALTER TABLE sessions ADD COLUMN project_id TEXT NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE schedules ADD COLUMN project_id TEXT NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE knowledge_collections ADD COLUMN project_id TEXT NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE eval_datasets ADD COLUMN project_id TEXT NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE eval_runs ADD COLUMN project_id TEXT NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE request_log ADD COLUMN project_id TEXT NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE feedback ADD COLUMN project_id TEXT NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';

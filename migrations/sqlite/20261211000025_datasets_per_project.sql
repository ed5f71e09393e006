-- Evaluation datasets belong to projects (docs/tenancy.md): their names are unique within a
-- project, so the keys that named a dataset now name its project too. Every existing row is
-- the default project's (the nil id). Not additive: a node from before this migration cannot
-- write datasets into the migrated database (CHANGELOG.md).
-- SQLite cannot change a primary key in place: the tables are built again (cases dropped
-- before datasets, so that no ON DELETE CASCADE runs).
CREATE TABLE eval_datasets_v2 (
    project_id TEXT    NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    name       TEXT    NOT NULL,
    version    INTEGER NOT NULL DEFAULT 0,
    cases      INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, name)
);

CREATE TABLE eval_cases_v2 (
    project_id TEXT    NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    dataset    TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    position   INTEGER NOT NULL,
    body       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, dataset, id),
    FOREIGN KEY (project_id, dataset) REFERENCES eval_datasets_v2 (project_id, name)
        ON DELETE CASCADE
);

INSERT INTO eval_datasets_v2 (project_id, name, version, cases, created_at, updated_at)
SELECT project_id, name, version, cases, created_at, updated_at FROM eval_datasets;

INSERT INTO eval_cases_v2 (project_id, dataset, id, position, body, created_at)
SELECT d.project_id, c.dataset, c.id, c.position, c.body, c.created_at
FROM eval_cases c JOIN eval_datasets d ON d.name = c.dataset;

DROP TABLE eval_cases;
DROP TABLE eval_datasets;
ALTER TABLE eval_datasets_v2 RENAME TO eval_datasets;
ALTER TABLE eval_cases_v2 RENAME TO eval_cases;

DROP INDEX IF EXISTS eval_runs_dataset;
CREATE INDEX eval_runs_dataset ON eval_runs (project_id, dataset, created_at);

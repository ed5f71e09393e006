-- Evaluations from the journal (docs/evals.md): datasets of cases taken from recorded sessions,
-- runs of a dataset through the agent loop, and each case's result. A case and a result are
-- stored whole as JSON (their shape is `stead-evals`'); the columns are what is filtered and
-- counted. Times are microseconds since the epoch. Additive: older nodes ignore the tables.
CREATE TABLE eval_datasets (
    name       TEXT    PRIMARY KEY,
    -- Moves on every change of the dataset's cases; a run names the version it ran.
    version    INTEGER NOT NULL DEFAULT 0,
    cases      INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE eval_cases (
    dataset    TEXT    NOT NULL REFERENCES eval_datasets (name) ON DELETE CASCADE,
    id         TEXT    NOT NULL,
    position   INTEGER NOT NULL,
    body       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (dataset, id)
);

CREATE TABLE eval_runs (
    id              TEXT    PRIMARY KEY,
    dataset         TEXT    NOT NULL,
    dataset_version INTEGER NOT NULL,
    settings        TEXT    NOT NULL,
    -- running | finished | failed
    status          TEXT    NOT NULL,
    total           INTEGER NOT NULL,
    done            INTEGER NOT NULL DEFAULT 0,
    passed          INTEGER NOT NULL DEFAULT 0,
    error           TEXT,
    created_at      INTEGER NOT NULL,
    finished_at     INTEGER
);

CREATE INDEX eval_runs_dataset ON eval_runs (dataset, created_at);

CREATE TABLE eval_results (
    run_id   TEXT    NOT NULL REFERENCES eval_runs (id) ON DELETE CASCADE,
    case_id  TEXT    NOT NULL,
    position INTEGER NOT NULL,
    passed   INTEGER NOT NULL,
    body     TEXT    NOT NULL,
    PRIMARY KEY (run_id, case_id)
);

-- An evaluation's sessions name their run: lists, the inbox and budgets leave them out unless
-- asked for them.
ALTER TABLE sessions ADD COLUMN eval_run TEXT;

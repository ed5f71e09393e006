-- Evaluations from the journal (docs/evals.md): datasets of cases taken from recorded sessions,
-- runs of a dataset through the agent loop, and each case's result. A case and a result are
-- stored whole as JSON (their shape is `stead-evals`'); the columns are what is filtered and
-- counted. Additive: older nodes ignore the tables.
CREATE TABLE eval_datasets (
    name       text        PRIMARY KEY,
    -- Moves on every change of the dataset's cases; a run names the version it ran.
    version    bigint      NOT NULL DEFAULT 0,
    cases      bigint      NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);

CREATE TABLE eval_cases (
    dataset    text        NOT NULL REFERENCES eval_datasets (name) ON DELETE CASCADE,
    id         uuid        NOT NULL,
    position   bigint      NOT NULL,
    body       jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (dataset, id)
);

CREATE TABLE eval_runs (
    id              uuid        PRIMARY KEY,
    dataset         text        NOT NULL,
    dataset_version bigint      NOT NULL,
    settings        jsonb       NOT NULL,
    -- running | finished | failed
    status          text        NOT NULL,
    total           bigint      NOT NULL,
    done            bigint      NOT NULL DEFAULT 0,
    passed          bigint      NOT NULL DEFAULT 0,
    error           text,
    created_at      timestamptz NOT NULL,
    finished_at     timestamptz
);

CREATE INDEX eval_runs_dataset ON eval_runs (dataset, created_at);

CREATE TABLE eval_results (
    run_id   uuid    NOT NULL REFERENCES eval_runs (id) ON DELETE CASCADE,
    case_id  uuid    NOT NULL,
    position bigint  NOT NULL,
    passed   boolean NOT NULL,
    body     jsonb   NOT NULL,
    PRIMARY KEY (run_id, case_id)
);

-- An evaluation's sessions name their run: lists, the inbox and budgets leave them out unless
-- asked for them.
ALTER TABLE sessions ADD COLUMN eval_run uuid;

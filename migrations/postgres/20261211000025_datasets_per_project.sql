-- Evaluation datasets belong to projects (docs/tenancy.md): their names are unique within a
-- project, so the keys that named a dataset now name its project too. Every existing row is
-- the default project's (the nil id). Not additive: a node from before this migration cannot
-- write datasets into the migrated database (CHANGELOG.md).
ALTER TABLE eval_cases
    ADD COLUMN project_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
UPDATE eval_cases c SET project_id = d.project_id
    FROM eval_datasets d WHERE d.name = c.dataset;
ALTER TABLE eval_cases DROP CONSTRAINT eval_cases_dataset_fkey;
ALTER TABLE eval_cases DROP CONSTRAINT eval_cases_pkey;
ALTER TABLE eval_datasets DROP CONSTRAINT eval_datasets_pkey;
ALTER TABLE eval_datasets ADD PRIMARY KEY (project_id, name);
ALTER TABLE eval_cases ADD PRIMARY KEY (project_id, dataset, id);
ALTER TABLE eval_cases ADD FOREIGN KEY (project_id, dataset)
    REFERENCES eval_datasets (project_id, name) ON DELETE CASCADE;

DROP INDEX IF EXISTS eval_runs_dataset;
CREATE INDEX eval_runs_dataset ON eval_runs (project_id, dataset, created_at);

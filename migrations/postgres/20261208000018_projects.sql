-- Projects (docs/design/tenancy-notes.md, step 1): every resource belongs to exactly one
-- project. The default project (the nil id) holds everything that existed before, and the
-- columns default to it, so rows written by older nodes land there too. Scoping by project is
-- built on these columns; until then every row is the default project's. Additive.
CREATE TABLE projects (
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL UNIQUE,
    settings   jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL
);

INSERT INTO projects (id, name, created_at)
VALUES ('00000000-0000-0000-0000-000000000000', 'default', now());

ALTER TABLE sessions ADD COLUMN project_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE schedules ADD COLUMN project_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE knowledge_collections ADD COLUMN project_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE eval_datasets ADD COLUMN project_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE eval_runs ADD COLUMN project_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE request_log ADD COLUMN project_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE feedback ADD COLUMN project_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';

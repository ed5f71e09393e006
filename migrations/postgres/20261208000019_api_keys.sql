-- Virtual keys (docs/design/tenancy-notes.md, step 2): keys a project's admin makes, each with a
-- role, the routes it may use, a budget, limits and an expiry. Only a SHA-256 digest of the
-- secret is kept (a random 256-bit secret needs no slow hash); `prefix` is what lists show.
-- Revoked keys stay (audit); a rotation names the key it replaced. Additive.
CREATE TABLE api_keys (
    id                 uuid             PRIMARY KEY,
    project_id         uuid             NOT NULL REFERENCES projects (id),
    name               text             NOT NULL,
    -- admin | member | viewer | inference
    role               text             NOT NULL,
    prefix             text             NOT NULL,
    digest             text             NOT NULL UNIQUE,
    -- null: every route the project allows; else a JSON list of route names
    routes             jsonb            NOT NULL DEFAULT 'null',
    budget_usd         double precision,
    budget_period_secs bigint,
    rpm                bigint,
    tpm                bigint,
    expires_at         timestamptz,
    revoked_at         timestamptz,
    rotated_from       uuid,
    created_at         timestamptz      NOT NULL
);

CREATE INDEX api_keys_project ON api_keys (project_id, created_at);

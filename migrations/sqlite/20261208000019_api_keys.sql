-- Virtual keys (docs/design/tenancy-notes.md, step 2): keys a project's admin makes, each with a
-- role, the routes it may use, a budget, limits and an expiry. Only a SHA-256 digest of the
-- secret is kept (a random 256-bit secret needs no slow hash); `prefix` is what lists show.
-- Revoked keys stay (audit); a rotation names the key it replaced. Times are microseconds since
-- the epoch. Additive.
CREATE TABLE api_keys (
    id                 TEXT    PRIMARY KEY,
    project_id         TEXT    NOT NULL REFERENCES projects (id),
    name               TEXT    NOT NULL,
    -- admin | member | viewer | inference
    role               TEXT    NOT NULL,
    prefix             TEXT    NOT NULL,
    digest             TEXT    NOT NULL UNIQUE,
    -- null: every route the project allows; else a JSON list of route names
    routes             TEXT    NOT NULL DEFAULT 'null',
    budget_usd         REAL,
    budget_period_secs INTEGER,
    rpm                INTEGER,
    tpm                INTEGER,
    expires_at         INTEGER,
    revoked_at         INTEGER,
    rotated_from       TEXT,
    created_at         INTEGER NOT NULL
);

CREATE INDEX api_keys_project ON api_keys (project_id, created_at);

-- Many nodes on one database (issue 20; a cluster needs PostgreSQL, the table exists on both
-- backends so their schemas stay alike). Times are microseconds since the epoch.
CREATE TABLE cluster_nodes (
    node_id       TEXT PRIMARY KEY,
    advertise_url TEXT NOT NULL,
    version       TEXT NOT NULL,
    started_at    INTEGER NOT NULL,
    heartbeat_at  INTEGER NOT NULL
);

CREATE INDEX sessions_running_lease ON sessions (lease_expires_at) WHERE status = 'running';

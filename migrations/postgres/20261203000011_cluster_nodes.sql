-- Many nodes on one PostgreSQL (issue 20): each node registers here and keeps its heartbeat
-- fresh; a node whose heartbeat lapsed is dead. Other nodes forward a session's requests to the
-- advertised address of the node holding its lease. Additive: older nodes ignore the table.
CREATE TABLE cluster_nodes (
    node_id       TEXT PRIMARY KEY,
    advertise_url TEXT NOT NULL,
    version       TEXT NOT NULL,
    started_at    TIMESTAMPTZ NOT NULL,
    heartbeat_at  TIMESTAMPTZ NOT NULL
);

-- The sweep's question: running sessions whose lease ran out.
CREATE INDEX sessions_running_lease ON sessions (lease_expires_at) WHERE status = 'running';

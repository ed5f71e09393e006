-- Strict budgets shared by the nodes of a cluster (issue 20; a cluster needs PostgreSQL, the
-- tables exist on both backends so their schemas stay alike). Times are microseconds since the
-- epoch.
CREATE TABLE budget_spending (
    key          TEXT PRIMARY KEY,
    window_start INTEGER NOT NULL,
    spent        REAL NOT NULL DEFAULT 0
);

CREATE TABLE budget_reservations (
    id         TEXT PRIMARY KEY,
    key        TEXT NOT NULL,
    node_id    TEXT NOT NULL,
    amount     REAL NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE INDEX budget_reservations_key ON budget_reservations (key);

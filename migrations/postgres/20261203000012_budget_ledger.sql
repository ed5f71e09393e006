-- Many nodes on one PostgreSQL (issue 20): strict budgets shared by every node. Each key's
-- spending in its current window is one row (its lock serialises reservations of that key);
-- each running call's reservation is a row naming its node, so a dead node's reservations are
-- booked as spent (the most they could have cost) instead of being held for good. Additive:
-- older nodes keep their own per-node ledger and ignore these tables.
CREATE TABLE budget_spending (
    key          TEXT PRIMARY KEY,
    window_start TIMESTAMPTZ NOT NULL,
    spent        DOUBLE PRECISION NOT NULL DEFAULT 0
);

CREATE TABLE budget_reservations (
    id         UUID PRIMARY KEY,
    key        TEXT NOT NULL,
    node_id    TEXT NOT NULL,
    amount     DOUBLE PRECISION NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);

CREATE INDEX budget_reservations_key ON budget_reservations (key);

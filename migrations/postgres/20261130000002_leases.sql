-- Session leases (SPEC §2.1): the node whose actor owns a session, and a fencing epoch that
-- every journal write of that actor is checked against.
ALTER TABLE sessions
    ADD COLUMN lease_owner TEXT,
    ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN lease_expires_at TIMESTAMPTZ NOT NULL DEFAULT 'epoch';

-- Session leases (SPEC §2.1): the node whose actor owns a session, and a fencing epoch that
-- every journal write of that actor is checked against. Times are microseconds since the epoch.
ALTER TABLE sessions ADD COLUMN lease_owner TEXT;
ALTER TABLE sessions ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN lease_expires_at INTEGER NOT NULL DEFAULT 0;

-- When a session last ended (closed or failed), for the retention sweep; the same schema as
-- PostgreSQL's, where an index on `updated_at` made every append's row update non-HOT.
ALTER TABLE sessions ADD COLUMN ended_at INTEGER;
UPDATE sessions SET ended_at = updated_at WHERE status IN ('closed', 'failed');
DROP INDEX sessions_ended_by_age;
CREATE INDEX sessions_ended_by_age ON sessions (ended_at, id) WHERE status IN ('closed', 'failed');

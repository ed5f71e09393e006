-- When a session last ended (closed or failed), for the retention sweep. The sweep used to
-- find ended sessions by `updated_at`, whose index made every journal append's update of the
-- session row a non-HOT update (a new version in all five indexes): appends changed an
-- indexed column. `ended_at` changes only when a session ends, so appends update the row in
-- place (HOT) — `stead bench journal` on PostgreSQL: see docs/benchmarks.md.
ALTER TABLE sessions ADD COLUMN ended_at timestamptz;
UPDATE sessions SET ended_at = updated_at WHERE status IN ('closed', 'failed');
DROP INDEX sessions_ended_by_age;
CREATE INDEX sessions_ended_by_age ON sessions (ended_at, id) WHERE status IN ('closed', 'failed');

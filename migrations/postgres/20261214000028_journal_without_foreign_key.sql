-- The journal's foreign key to `sessions` is dropped on PostgreSQL: each appended row's check
-- (a `SELECT … FOR KEY SHARE` of its session's row, run per row by the constraint's trigger)
-- cost about a third of a group commit's server time (docs/benchmarks.md, *The journal's
-- foreign key dropped*), and it guarded nothing the append does not already: the fenced
-- `UPDATE sessions … RETURNING id` that gates every journal `INSERT` finds and locks the
-- session's row in the same statement. Deleting a session removes its journal rows explicitly,
-- after the session's row (whose delete waits for an append holding that row's lock), in one
-- transaction (docs/persistence.md, *Deleting a session*).
ALTER TABLE journal DROP CONSTRAINT journal_session_id_fkey;

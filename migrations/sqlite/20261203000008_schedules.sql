-- Schedules' due index (docs/schedules.md). A session's schedules live in its journal
-- (`schedule_created`, `schedule_fired`, `schedule_cancelled`); a row here is the wake-up hint
-- the scheduler polls: when the next occurrence is due. An agent's schedules (each firing
-- starts a new session) have no journal: for them the row is the record. Times are
-- microseconds since the epoch.
CREATE TABLE schedules (
    -- The session's id as text, or `agent:{name}` for an agent's schedule.
    owner       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    session_id  TEXT    REFERENCES sessions (id) ON DELETE CASCADE,
    agent       TEXT    NOT NULL,
    definition  TEXT    NOT NULL,
    next_due_at INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (owner, key)
);

CREATE INDEX schedules_due ON schedules (next_due_at);
CREATE INDEX schedules_session ON schedules (session_id) WHERE session_id IS NOT NULL;

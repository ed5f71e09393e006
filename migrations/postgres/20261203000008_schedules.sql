-- Schedules' due index (docs/schedules.md). A session's schedules live in its journal
-- (`schedule_created`, `schedule_fired`, `schedule_cancelled`); a row here is the wake-up hint
-- the scheduler polls: when the next occurrence is due. An agent's schedules (each firing
-- starts a new session) have no journal: for them the row is the record.
CREATE TABLE schedules (
    -- The session's id as text, or `agent:{name}` for an agent's schedule.
    owner       text        NOT NULL,
    key         text        NOT NULL,
    session_id  uuid        REFERENCES sessions (id) ON DELETE CASCADE,
    agent       text        NOT NULL,
    definition  jsonb       NOT NULL,
    next_due_at timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (owner, key)
);

CREATE INDEX schedules_due ON schedules (next_due_at);
CREATE INDEX schedules_session ON schedules (session_id) WHERE session_id IS NOT NULL;

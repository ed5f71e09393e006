-- Sub-agents (issue 19): a child session names the session and the tool call that started it,
-- so a parent's children are one indexed query. Additive: older nodes ignore the columns.
ALTER TABLE sessions ADD COLUMN parent_session_id uuid REFERENCES sessions (id) ON DELETE SET NULL;
ALTER TABLE sessions ADD COLUMN parent_call_id text;

CREATE INDEX sessions_parent_newest ON sessions (parent_session_id, created_at DESC, id DESC)
    WHERE parent_session_id IS NOT NULL;

-- Journal retention: a compacted session keeps, instead of its journal up to `through_seq`, the
-- folded state at that seq (versioned, as the session actor's snapshots) and a summary.
CREATE TABLE journal_compactions (
    session_id   uuid        PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    through_seq  bigint      NOT NULL CHECK (through_seq >= 1),
    state        jsonb       NOT NULL,
    summary      jsonb       NOT NULL,
    compacted_at timestamptz NOT NULL
);

-- The retention sweep looks for ended sessions by age.
CREATE INDEX sessions_ended_by_age ON sessions (updated_at) WHERE status IN ('closed', 'failed');

-- Journal retention: a compacted session keeps, instead of its journal up to `through_seq`, the
-- folded state at that seq (versioned, as the session actor's snapshots) and a summary.
CREATE TABLE journal_compactions (
    session_id   TEXT    PRIMARY KEY NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    through_seq  INTEGER NOT NULL CHECK (through_seq >= 1),
    state        TEXT    NOT NULL,
    summary      TEXT    NOT NULL,
    compacted_at INTEGER NOT NULL
) WITHOUT ROWID;

-- The retention sweep looks for ended sessions by age.
CREATE INDEX sessions_ended_by_age ON sessions (updated_at) WHERE status IN ('closed', 'failed');

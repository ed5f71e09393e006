-- Reviewers' feedback on replies (docs/evals.md, "From production to dataset"): a thumbs up or
-- down on one `assistant_message` of a session, with a note and, for a bad reply, the reply
-- that was wanted. A rating can become an evaluation case whose expectation is the correction.
-- Deleted with its session's purge. Times are microseconds since the epoch. Additive: older
-- nodes ignore the table.
CREATE TABLE feedback (
    id         TEXT    PRIMARY KEY,
    session_id TEXT    NOT NULL,
    -- The seq of the rated `assistant_message`.
    seq        INTEGER NOT NULL,
    -- up | down
    rating     TEXT    NOT NULL,
    note       TEXT    NOT NULL DEFAULT '',
    correction TEXT,
    -- Who rated it (an operator key's fingerprint, `local`, or a session token).
    created_by TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE INDEX feedback_session ON feedback (session_id, seq);
CREATE INDEX feedback_created ON feedback (created_at);

-- Reviewers' feedback on replies (docs/evals.md, "From production to dataset"): a thumbs up or
-- down on one `assistant_message` of a session, with a note and, for a bad reply, the reply
-- that was wanted. A rating can become an evaluation case whose expectation is the correction.
-- Deleted with its session's purge. Additive: older nodes ignore the table.
CREATE TABLE feedback (
    id         uuid        PRIMARY KEY,
    session_id uuid        NOT NULL,
    -- The seq of the rated `assistant_message`.
    seq        bigint      NOT NULL,
    -- up | down
    rating     text        NOT NULL,
    note       text        NOT NULL DEFAULT '',
    correction text,
    -- Who rated it (an operator key's fingerprint, `local`, or a session token).
    created_by text        NOT NULL,
    created_at timestamptz NOT NULL
);

CREATE INDEX feedback_session ON feedback (session_id, seq);
CREATE INDEX feedback_created ON feedback (created_at);

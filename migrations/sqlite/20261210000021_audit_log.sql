-- The audit log (docs/audit.md): every state-changing act of a person or key, append-only —
-- who (`actor`), when, what (`action`: the operation, `target`: the path it named), from where
-- (`source`: the peer address), in which project, and a few facts the handler adds (never a
-- secret, never a request body). Rows are removed only by retention (`[audit] retention_days`);
-- an UPDATE is refused by the trigger below. Times are microseconds since the epoch. Additive.
CREATE TABLE audit_log (
    id         TEXT    PRIMARY KEY,
    at         INTEGER NOT NULL,
    project_id TEXT    NOT NULL,
    actor      TEXT    NOT NULL,
    action     TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    status     INTEGER NOT NULL,
    source     TEXT,
    details    TEXT    NOT NULL DEFAULT '{}'
);

CREATE INDEX audit_log_project_at ON audit_log (project_id, at DESC, id DESC);
CREATE INDEX audit_log_at ON audit_log (at DESC, id DESC);

CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only');
END;

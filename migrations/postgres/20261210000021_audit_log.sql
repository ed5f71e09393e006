-- The audit log (docs/audit.md): every state-changing act of a person or key, append-only —
-- who (`actor`), when, what (`action`: the operation, `target`: the path it named), from where
-- (`source`: the peer address), in which project, and a few facts the handler adds (never a
-- secret, never a request body). Rows are removed only by retention (`[audit] retention_days`);
-- an UPDATE is refused by the trigger below. Additive.
CREATE TABLE audit_log (
    id         uuid        PRIMARY KEY,
    at         timestamptz NOT NULL,
    project_id uuid        NOT NULL,
    actor      text        NOT NULL,
    action     text        NOT NULL,
    target     text        NOT NULL,
    status     bigint      NOT NULL,
    source     text,
    details    jsonb       NOT NULL DEFAULT '{}'
);

CREATE INDEX audit_log_project_at ON audit_log (project_id, at DESC, id DESC);
CREATE INDEX audit_log_at ON audit_log (at DESC, id DESC);

CREATE FUNCTION audit_log_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();

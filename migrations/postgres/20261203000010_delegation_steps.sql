-- Sub-agents (issue 19): the model calls a delegation has made — the child session of a
-- top-level session's agent call and all its descendants — counted on that child's row, so
-- `sessions.max_delegation_steps` bounds the whole subtree on any node. Additive.
ALTER TABLE sessions ADD COLUMN delegation_steps BIGINT NOT NULL DEFAULT 0;

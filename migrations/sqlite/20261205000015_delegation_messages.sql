-- Issue 39, item 11: one budget per message of a top-level session, across its whole tree of
-- sub-agents. The top-level session's row counts its current message's descendants' model
-- calls (`delegation_steps`, reused) and child sessions (`delegation_sessions`);
-- `delegation_turn` is the seq at which that message's turn started — a charge for a later
-- turn starts the counts again. Additive.
ALTER TABLE sessions ADD COLUMN delegation_turn BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN delegation_sessions BIGINT NOT NULL DEFAULT 0;

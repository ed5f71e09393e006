-- Each process of a node registers with an instance id of its own (issue 20; see the
-- PostgreSQL migration).
ALTER TABLE cluster_nodes ADD COLUMN instance TEXT;

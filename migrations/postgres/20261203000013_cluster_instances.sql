-- Many nodes (issue 20): each process of a node registers with an instance id of its own, so
-- that a second live process started with the same `server.node_id` is told apart (it is
-- refused at start, or — when the first one's heartbeat had lapsed — the first one stops).
-- Additive: rows of older nodes have no instance.
ALTER TABLE cluster_nodes ADD COLUMN instance TEXT;

-- Project scope (docs/tenancy.md): a project's sessions newest first, and its ratings, are read
-- through these rather than by filtering the whole table. Additive.
CREATE INDEX sessions_project_newest ON sessions (project_id, created_at DESC, id DESC);
CREATE INDEX feedback_project ON feedback (project_id, created_at);

-- Knowledge collections belong to projects (docs/tenancy.md): their
-- names are unique within a project, so every key that named a collection now names its
-- project too. Every existing row is the default project's (the nil id). Not
-- additive: a node from before this migration cannot write knowledge into the
-- migrated database (CHANGELOG.md).
ALTER TABLE knowledge_documents
    ADD COLUMN project_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE knowledge_chunks
    ADD COLUMN project_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
UPDATE knowledge_documents d SET project_id = c.project_id
    FROM knowledge_collections c WHERE c.name = d.collection;
UPDATE knowledge_chunks k SET project_id = c.project_id
    FROM knowledge_collections c WHERE c.name = k.collection;

ALTER TABLE knowledge_chunks DROP CONSTRAINT knowledge_chunks_collection_document_id_fkey;
ALTER TABLE knowledge_documents DROP CONSTRAINT knowledge_documents_collection_fkey;
ALTER TABLE knowledge_chunks DROP CONSTRAINT knowledge_chunks_pkey;
ALTER TABLE knowledge_documents DROP CONSTRAINT knowledge_documents_pkey;
ALTER TABLE knowledge_collections DROP CONSTRAINT knowledge_collections_pkey;

ALTER TABLE knowledge_collections ADD PRIMARY KEY (project_id, name);
ALTER TABLE knowledge_documents ADD PRIMARY KEY (project_id, collection, id);
ALTER TABLE knowledge_documents ADD FOREIGN KEY (project_id, collection)
    REFERENCES knowledge_collections (project_id, name) ON DELETE CASCADE;
ALTER TABLE knowledge_chunks ADD PRIMARY KEY (project_id, collection, document_id, chunk_index);
ALTER TABLE knowledge_chunks ADD FOREIGN KEY (project_id, collection, document_id)
    REFERENCES knowledge_documents (project_id, collection, id) ON DELETE CASCADE;

-- Session-token rotation: a token names the generation it was issued for; minting a new one
-- (POST /v1/sessions/{id}/token) increments it, which invalidates every older token.
ALTER TABLE sessions ADD COLUMN token_generation BIGINT NOT NULL DEFAULT 0;

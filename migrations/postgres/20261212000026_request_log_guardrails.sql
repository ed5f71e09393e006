-- The route's guardrails that acted on a call (docs/guardrails.md): `[{guardrail, place,
-- effect, entities}]`, entities only, never the text. Additive: a node from before writes `[]`.
ALTER TABLE request_log ADD COLUMN guardrails jsonb NOT NULL DEFAULT '[]'::jsonb;

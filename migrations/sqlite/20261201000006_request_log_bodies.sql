-- `[gateway.log] bodies = "full"`: a call's request (messages, tools, parameters) and response
-- (text, tool calls); null when bodies are not kept.
ALTER TABLE request_log ADD COLUMN bodies TEXT NOT NULL DEFAULT 'null';

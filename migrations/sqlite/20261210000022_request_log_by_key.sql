-- A project's spend (docs/tenancy.md, "Spend") reads the calls charged to its keys in a time
-- range: by key, then time. Additive.
CREATE INDEX request_log_api_key_at ON request_log (api_key, at);

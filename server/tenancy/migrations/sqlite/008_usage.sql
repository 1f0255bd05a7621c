-- Usage per project, key and model, by the minute (server/tenancy/usage.py): limits are checked against it and the
-- usage API reads it. `minute` is Unix seconds // 60; `api_key_id` is '' for requests made with no key.
CREATE TABLE usage_minutes (
    project TEXT NOT NULL,
    api_key_id TEXT NOT NULL,
    model TEXT NOT NULL,
    minute INTEGER NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (project, api_key_id, model, minute)
);
CREATE INDEX usage_minutes_by_project ON usage_minutes (project, minute);
CREATE INDEX usage_minutes_by_minute ON usage_minutes (minute);

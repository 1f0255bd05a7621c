-- Usage counts batch work apart (server/batches): `batch` is 1 for the tokens of batch requests, 0 for the rest;
-- limits are checked against the rest. The table is made again with `batch` in its key, its rows kept.
CREATE TABLE usage_minutes_new (
    project TEXT NOT NULL,
    api_key_id TEXT NOT NULL,
    model TEXT NOT NULL,
    minute INTEGER NOT NULL,
    batch INTEGER NOT NULL DEFAULT 0,
    requests INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (project, api_key_id, model, minute, batch)
);
INSERT INTO usage_minutes_new (project, api_key_id, model, minute, batch, requests, input_tokens, cached_tokens,
                               output_tokens, reasoning_tokens)
    SELECT project, api_key_id, model, minute, 0, requests, input_tokens, cached_tokens, output_tokens,
           reasoning_tokens FROM usage_minutes;
DROP TABLE usage_minutes;
ALTER TABLE usage_minutes_new RENAME TO usage_minutes;
CREATE INDEX usage_minutes_by_project ON usage_minutes (project, minute);
CREATE INDEX usage_minutes_by_minute ON usage_minutes (minute);

-- API keys made by `responses-server keys create`: the key's SHA-256 only, never the key; the project it acts for.
CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    project TEXT NOT NULL,
    admin INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    last_used_at REAL,
    revoked_at REAL
);

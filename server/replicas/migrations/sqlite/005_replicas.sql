-- The replicas that take forwarded requests, each with the address the others reach it at and a heartbeat
-- on the database's clock (the responses' and conversations' `replica` columns are in the same version).
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    heartbeat_at REAL NOT NULL,
    draining INTEGER NOT NULL DEFAULT 0
);

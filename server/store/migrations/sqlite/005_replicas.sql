-- Prefix-cache affinity: the replica that generated each response, the one whose response last added to each
-- conversation, and the replicas that take forwarded requests, each with the address the others reach it at and a
-- heartbeat on the database's clock.
ALTER TABLE responses ADD COLUMN replica TEXT;
ALTER TABLE conversations ADD COLUMN replica TEXT;
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    heartbeat_at REAL NOT NULL,
    draining INTEGER NOT NULL DEFAULT 0
);

-- Batches (/v1/batches, server/batches), each its project's (every read names the project): the columns a runner
-- and a list look up, the rest as JSON; the lease of the replica running it. Each line's result is kept once.
CREATE TABLE batches (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    api_key_id TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    input_file_id TEXT NOT NULL,
    completion_window TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    status TEXT NOT NULL,
    details TEXT NOT NULL,
    lease_owner TEXT,
    lease_until REAL
);
CREATE INDEX batches_by_project ON batches (project, created_at);
CREATE INDEX batches_by_status ON batches (status, created_at);
CREATE TABLE batch_results (
    batch_id TEXT NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
    line INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (batch_id, line)
);

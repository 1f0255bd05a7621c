-- Uploaded files (/v1/files), each its project's (every query names the project); content in parts of up to 1 MiB,
-- written with the file's row in one transaction. An expired file is read as a missing one.
CREATE TABLE files (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    filename TEXT NOT NULL,
    purpose TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT
);
CREATE INDEX files_by_project ON files (project, created_at);
CREATE TABLE file_parts (
    file_id TEXT NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (file_id, position)
);

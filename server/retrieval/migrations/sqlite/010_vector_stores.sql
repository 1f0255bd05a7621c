-- Vector stores (/v1/vector_stores), each its project's (every query names the project): the embedding model and
-- dimensions its chunks were embedded with, its files (status, attributes, chunking, the process ingesting one and
-- until when its lease holds),
-- file batches, and the chunks: text, where each is in its file, and its vector (float32, unit length).
CREATE TABLE vector_stores (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT,
    metadata TEXT NOT NULL,
    embedding_model TEXT NOT NULL,
    dimensions INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    last_active_at INTEGER NOT NULL,
    expires_after_days INTEGER
);
CREATE INDEX vector_stores_by_project ON vector_stores (project, id);
CREATE TABLE vector_store_batches (
    id TEXT PRIMARY KEY,
    vector_store_id TEXT NOT NULL REFERENCES vector_stores(id) ON DELETE CASCADE,
    project TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    cancelled INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE vector_store_files (
    vector_store_id TEXT NOT NULL REFERENCES vector_stores(id) ON DELETE CASCADE,
    file_id TEXT NOT NULL,
    project TEXT NOT NULL,
    batch_id TEXT,
    filename TEXT NOT NULL,
    status TEXT NOT NULL,
    attributes TEXT NOT NULL,
    chunking TEXT NOT NULL,
    usage_bytes INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    created_at INTEGER NOT NULL,
    worker TEXT,
    lease_until REAL,
    PRIMARY KEY (vector_store_id, file_id)
);
CREATE INDEX vector_store_files_in_progress ON vector_store_files (status, lease_until);
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    vector_store_id TEXT NOT NULL,
    file_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    text TEXT NOT NULL,
    place TEXT NOT NULL,
    embedding BLOB NOT NULL
);
CREATE INDEX chunks_by_file ON chunks (vector_store_id, file_id);
-- The chunks' words for keyword search (BM25), by the chunk's id; written and deleted with the chunks.
CREATE VIRTUAL TABLE chunk_words USING fts5(text, tokenize = 'unicode61 remove_diacritics 2');

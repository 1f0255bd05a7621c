-- Vector stores (/v1/vector_stores), each its project's (every query names the project): the embedding model and
-- dimensions its chunks were embedded with, its files (status, attributes, chunking, the process ingesting one and
-- until when its lease holds), file batches, and the chunks: text (with its words for keyword search), where each is
-- in its file, and its vector (unit length, as real[]: ranked by its dot product with the query's in SQL).
CREATE TABLE vector_stores (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT,
    metadata JSONB NOT NULL,
    embedding_model TEXT NOT NULL,
    dimensions INTEGER NOT NULL,
    created_at BIGINT NOT NULL,
    last_active_at BIGINT NOT NULL,
    expires_after_days INTEGER
);
CREATE INDEX vector_stores_by_project ON vector_stores (project, id);
CREATE TABLE vector_store_batches (
    id TEXT PRIMARY KEY,
    vector_store_id TEXT NOT NULL REFERENCES vector_stores(id) ON DELETE CASCADE,
    project TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    cancelled BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE TABLE vector_store_files (
    vector_store_id TEXT NOT NULL REFERENCES vector_stores(id) ON DELETE CASCADE,
    file_id TEXT NOT NULL,
    project TEXT NOT NULL,
    batch_id TEXT,
    filename TEXT NOT NULL,
    status TEXT NOT NULL,
    attributes JSONB NOT NULL,
    chunking TEXT NOT NULL,
    usage_bytes BIGINT NOT NULL DEFAULT 0,
    last_error TEXT,
    created_at BIGINT NOT NULL,
    worker TEXT,
    lease_until DOUBLE PRECISION,
    PRIMARY KEY (vector_store_id, file_id)
);
CREATE INDEX vector_store_files_in_progress ON vector_store_files (status, lease_until);
CREATE TABLE chunks (
    id BIGSERIAL PRIMARY KEY,
    vector_store_id TEXT NOT NULL,
    file_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    text TEXT NOT NULL,
    place JSONB NOT NULL,
    embedding REAL[] NOT NULL,
    words TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,
    FOREIGN KEY (vector_store_id, file_id) REFERENCES vector_store_files ON DELETE CASCADE
);
CREATE INDEX chunks_by_file ON chunks (vector_store_id, file_id);
CREATE INDEX chunks_words ON chunks USING GIN (words);

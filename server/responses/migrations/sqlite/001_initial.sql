-- The first schema: responses with their input items and event logs, and conversations with their items.
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    status TEXT NOT NULL,
    response TEXT NOT NULL,
    previous_response_id TEXT,
    background INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS input_items (
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (response_id, position)
);
CREATE TABLE IF NOT EXISTS events (
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    sequence_number INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (response_id, sequence_number)
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses(created_at);
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    metadata TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS conversation_items (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (conversation_id, position)
);
CREATE UNIQUE INDEX IF NOT EXISTS conversation_items_by_id ON conversation_items(conversation_id, item_id);

-- The schema: responses with their input items and event logs, and conversations with their items.
-- Background responses are owned by the replica running them, under a lease it renews; a cancel is requested here.
CREATE TABLE responses (
    id TEXT PRIMARY KEY,
    created_at DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL,
    response TEXT NOT NULL,
    previous_response_id TEXT,
    background BOOLEAN NOT NULL DEFAULT FALSE,
    owner TEXT,
    lease_expires_at DOUBLE PRECISION,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX responses_by_age ON responses(created_at);
CREATE INDEX responses_running ON responses(status) WHERE status IN ('queued', 'in_progress');
CREATE TABLE input_items (
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (response_id, position)
);
CREATE TABLE events (
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    sequence_number INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (response_id, sequence_number)
);
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    metadata TEXT NOT NULL
);
CREATE TABLE conversation_items (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (conversation_id, position)
);
CREATE UNIQUE INDEX conversation_items_by_id ON conversation_items(conversation_id, item_id);

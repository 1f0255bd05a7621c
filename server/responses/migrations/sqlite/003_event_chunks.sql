-- A response's event log is kept in chunks, one row per write (its end, or what a background response adds), not
-- one row per event: the events first_sequence..last_sequence, their JSON one per line.
CREATE TABLE IF NOT EXISTS event_chunks (
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    first_sequence INTEGER NOT NULL,
    last_sequence INTEGER NOT NULL,
    events TEXT NOT NULL,
    PRIMARY KEY (response_id, first_sequence)
);
INSERT INTO event_chunks (response_id, first_sequence, last_sequence, events)
    SELECT response_id, sequence_number, sequence_number, event FROM events;
DROP TABLE events;

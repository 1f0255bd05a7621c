-- Items found by their id (item_reference): a response's input and output items, and conversations' items.
CREATE INDEX IF NOT EXISTS input_items_by_item ON input_items(item_id);
CREATE INDEX IF NOT EXISTS conversation_items_by_item ON conversation_items(item_id);
CREATE TABLE IF NOT EXISTS output_items (
    item_id TEXT NOT NULL,
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    PRIMARY KEY (item_id, response_id)
);
CREATE INDEX IF NOT EXISTS output_items_by_response ON output_items(response_id);

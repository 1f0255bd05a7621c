-- Webhook deliveries waiting to be sent: one row per background response's ending, written in the same transaction
-- as the ending; claimed by one replica at a time under a lease, deleted once delivered (or given up).
CREATE TABLE webhook_outbox (
    id TEXT PRIMARY KEY,
    response_id TEXT NOT NULL,
    type TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at DOUBLE PRECISION NOT NULL,
    claimed_by TEXT,
    claimed_until DOUBLE PRECISION
);
CREATE INDEX webhook_outbox_due ON webhook_outbox(next_attempt_at);

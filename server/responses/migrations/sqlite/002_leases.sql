-- Background responses are owned by the replica running them, under a lease it renews; a cancel is requested here.
ALTER TABLE responses ADD COLUMN owner TEXT;
ALTER TABLE responses ADD COLUMN lease_expires_at REAL;
ALTER TABLE responses ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS responses_running ON responses(status) WHERE status IN ('queued', 'in_progress');

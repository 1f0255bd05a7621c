-- Tenancy: every response and conversation belongs to a project (server/tenancy); rows stored before belong to the
-- default project. Their items, event logs and webhook deliveries belong to their response or conversation.
ALTER TABLE responses ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
ALTER TABLE conversations ADD COLUMN project TEXT NOT NULL DEFAULT 'default';

-- Prefix-cache affinity: the replica that generated each response, and the one whose response last added to each
-- conversation (the replicas' own table, server/replicas, is in the same version).
ALTER TABLE responses ADD COLUMN replica TEXT;
ALTER TABLE conversations ADD COLUMN replica TEXT;

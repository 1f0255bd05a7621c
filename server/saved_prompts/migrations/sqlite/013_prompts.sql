-- Reusable prompts (server/saved_prompts): each version of a project's prompt, its instructions and input items
-- (JSON) with {{variables}}; a prompt is the versions that share its id.
CREATE TABLE prompts (
    id TEXT NOT NULL,
    version INTEGER NOT NULL,
    project TEXT NOT NULL,
    instructions TEXT,
    input TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (id, version)
);
CREATE INDEX prompts_by_project ON prompts(project, created_at);

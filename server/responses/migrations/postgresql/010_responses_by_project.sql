-- Lists of a project's responses (GET /v1/responses, the console), newest first; a second's responses in the
-- order their rows were inserted (`inserted`, numbered by a sequence).
ALTER TABLE responses ADD COLUMN IF NOT EXISTS inserted BIGSERIAL;
CREATE INDEX IF NOT EXISTS responses_by_project ON responses(project, created_at, inserted);

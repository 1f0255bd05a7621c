-- Each response's timeline (server/runs/timeline.py): its phases as it was served, as JSON.
ALTER TABLE responses ADD COLUMN timeline TEXT;

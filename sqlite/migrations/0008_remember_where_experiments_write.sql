-- Where the command line writes an experiment's files (results.jsonl,
-- report.json, report.md): an absolute directory, so that a resume or a
-- replay writes beside what the run wrote. NULL for an experiment no
-- command has written; the row's checksum covers it once it is set.
ALTER TABLE experiments ADD COLUMN out TEXT;

-- What an instance was made for (flow.Instance.Tags): an experiment's
-- instances name the experiment, condition, label, sample and repeat. A
-- JSON object on the instance's first row, NULL for an instance with none;
-- the row's checksum covers it when it is set. The index finds an
-- experiment's instances without reading every other instance's row.
ALTER TABLE log ADD COLUMN tags TEXT;
CREATE INDEX log_experiment ON log (json_extract(tags, '$.experiment'), created_at) WHERE tags IS NOT NULL;

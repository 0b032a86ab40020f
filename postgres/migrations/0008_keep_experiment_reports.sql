-- An experiment's report as the lab kept it when its status last left
-- running, so that reading a finished experiment reads no outcome: NULL
-- while none is kept. report_sum is its checksum, apart from the row's
-- sum, which covers the rest as before: a listing, which leaves reports
-- out, still checks every row it reads.
ALTER TABLE experiments ADD COLUMN report json, ADD COLUMN report_sum bigint;

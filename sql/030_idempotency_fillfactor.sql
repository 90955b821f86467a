-- Idempotency records: room on each page for the completion's HOT update, and a vacuum fit
-- for their churn.
--
-- A record is inserted 'executing' and updated once, on completion, with the response (status,
-- headers, body); it is deleted by retention after expires_at. The completion changes no
-- indexed column, so it can be a HOT update (no index entry written) when the record's page
-- has room for the new version, which is larger than the first by the response. At the
-- default fillfactor (100) the inserts fill the pages, and 79.0% of the completions were HOT
-- in internal/idembench (32 clients, POST /stores, 3,360 completions; 81.1% in an earlier
-- run). Measured the same way, one run each on the shared 2-core machine (load average
-- 17-29), 2026-12-03: fillfactor 85: 98.8%, 70: 98.2%, 50: 99.7%. Fillfactor 85 gets the
-- completions HOT for 15% more heap; lower buys nothing measurable.
--
-- Autovacuum: every record ends as a dead row version (the completion's old version, pruned
-- on the page when it is HOT, and the retention delete), so the table is vacuumed once 2% of
-- it (plus 1,000 rows) is dead, about an hour of retention deletes in a table of 48 hours of
-- records, rather than the default 20% (ten hours of them).

-- +goose Up
SET LOCAL ROLE listing_owner;
ALTER TABLE idempotency_requests SET (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.02,
  autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02);
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
ALTER TABLE idempotency_requests RESET (fillfactor, autovacuum_vacuum_scale_factor,
  autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor);
RESET ROLE;

-- The idempotency record's two CHECK constraints (001: status in executing/completed,
-- expires_at at least 24 hours after created_at) go; the statement that writes the record
-- (infra/idem, the only writer) holds both itself: the status it writes is the literal
-- 'completed', and its expiry is now() plus the larger of the configured retention (which
-- idem.Config refuses below 24 hours) and 24 hours.
--
-- A CHECK constraint is planned again for every INSERT that runs it: the executor reads
-- each constraint's expression from the relation's cache as text, parses and prepares it
-- once per statement, and a guarded request inserts one row per statement. pgbench, one
-- client, this table's insert as infra/idem sends it (prepared, synchronous_commit off):
-- 26.6 / 28.4 us of execution a row with the two checks, 17.2 / 20.0 without (fillfactor
-- and indexes as here; load 19-21), a third of the record's execution.
--
-- The table's fillfactor 85 (030) goes back to the default: it kept room for the update
-- that completed a record, and records are written once now (065); the rare replacement
-- of an expired record need not be a HOT update. Same pgbench, with the checks: 26.6 /
-- 28.4 us at 85, 23.6 / 25.9 at the default.

-- +goose Up
SET LOCAL ROLE listing_owner;
ALTER TABLE idempotency_requests DROP CONSTRAINT idempotency_requests_retention;
ALTER TABLE idempotency_requests DROP CONSTRAINT idempotency_requests_status_check;
ALTER TABLE idempotency_requests RESET (fillfactor);
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
ALTER TABLE idempotency_requests ADD CONSTRAINT idempotency_requests_status_check
  CHECK (status IN ('executing', 'completed'));
ALTER TABLE idempotency_requests ADD CONSTRAINT idempotency_requests_retention
  CHECK (expires_at >= created_at + interval '24 hours');
ALTER TABLE idempotency_requests SET (fillfactor = 85);
RESET ROLE;

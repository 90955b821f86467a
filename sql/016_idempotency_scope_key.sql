-- An idempotency record is found by its scope: the scope is its primary key (issue 13).
--
-- Every statement of the guard finds a record by its scope (workspace, user, method, path,
-- key), through the unique constraint idempotency_requests_scope; only the completion and
-- the deletes used the id, through a primary key of its own. That index cost every guarded
-- request one more index entry to write: pgbench, 32 clients, a plain insert of the record
-- beside a one-row handler (foreign keys dropped for the measure) left 0.74-0.81 of the
-- handler's throughput with it, 0.83-0.89 without. The
-- scope now is the primary key, under the constraint's old name (so ON CONFLICT ON
-- CONSTRAINT idempotency_requests_scope is unchanged); id stays, unindexed, and the guard
-- checks it beside the scope so that a transaction completes only the record it inserted.

-- +goose Up
SET LOCAL ROLE listing_owner;
ALTER TABLE idempotency_requests
  DROP CONSTRAINT idempotency_requests_pkey,
  DROP CONSTRAINT idempotency_requests_scope,
  ADD CONSTRAINT idempotency_requests_scope PRIMARY KEY (workspace_id, user_id, method, path, idempotency_key);
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
ALTER TABLE idempotency_requests
  DROP CONSTRAINT idempotency_requests_scope,
  ADD CONSTRAINT idempotency_requests_pkey PRIMARY KEY (id),
  ADD CONSTRAINT idempotency_requests_scope UNIQUE (workspace_id, user_id, method, path, idempotency_key);
RESET ROLE;

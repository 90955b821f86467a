-- Stores can be disconnected (DELETE …/stores/{store_id}): status disconnected, credentials
-- erased, disconnected_at set; replacing the authorization reconnects the store.

-- +goose Up
SET LOCAL ROLE listing_owner;
ALTER TABLE stores ADD COLUMN disconnected_at timestamptz;
ALTER TABLE stores DROP CONSTRAINT stores_status_check,
  ADD CONSTRAINT stores_status_check CHECK (status IN ('pending_verification', 'verified', 'invalid', 'disconnected'));
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
-- A disconnected store becomes invalid (its credentials are erased): every row, so the
-- owner's forced RLS is relaxed for this transaction only, under the lock.
LOCK TABLE stores IN ACCESS EXCLUSIVE MODE;
ALTER TABLE stores NO FORCE ROW LEVEL SECURITY;
UPDATE stores SET status = 'invalid', status_reason = 'disconnected' WHERE status = 'disconnected';
ALTER TABLE stores FORCE ROW LEVEL SECURITY;
ALTER TABLE stores DROP CONSTRAINT stores_status_check,
  ADD CONSTRAINT stores_status_check CHECK (status IN ('pending_verification', 'verified', 'invalid'));
ALTER TABLE stores DROP COLUMN disconnected_at;
RESET ROLE;

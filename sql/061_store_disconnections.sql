-- Stores can be disconnected (DELETE …/stores/{store_id}): status disconnected, credentials
-- erased, disconnected_at set; replacing the authorization reconnects the store. A
-- disconnection is a task (store_disconnections); its guard "store connected" (060) refuses
-- every other task of a store disconnected or whose disconnection is pending or running.

-- +goose Up
SET LOCAL ROLE listing_owner;
ALTER TABLE stores ADD COLUMN disconnected_at timestamptz;
ALTER TABLE stores DROP CONSTRAINT stores_status_check,
  ADD CONSTRAINT stores_status_check CHECK (status IN ('pending_verification', 'verified', 'invalid', 'disconnected'));

CREATE TABLE store_disconnections (
  store_id uuid NOT NULL REFERENCES stores (id) ON DELETE CASCADE
);
SELECT prepare_task_table('store_disconnections');
CREATE INDEX store_disconnections_list ON store_disconnections (workspace_id, store_id, created_at DESC, id DESC);
INSERT INTO task_guards (name, aggregate_table, task_column, holds, error_code, except_table)
VALUES ('store connected', 'stores', 'store_id', $$a.status <> 'disconnected' AND NOT EXISTS (SELECT 1
  FROM store_disconnections d WHERE d.store_id = a.id AND d.status IN ('pending', 'running'))$$,
  'STORE_DISCONNECTED', 'store_disconnections');
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DELETE FROM task_guards WHERE name = 'store connected';
DELETE FROM task_tables WHERE table_name = 'store_disconnections';
DROP TABLE IF EXISTS store_disconnections;
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

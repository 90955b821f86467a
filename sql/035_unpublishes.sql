-- Unpublish (docs/http-api.md): an unpublish deletes the platform product of a published
-- publication; once it succeeded, publications.unpublished_at is set (the publication's task
-- status stays succeeded) and the product may be published to the store again: the first-
-- publication rule counts only publications that are not failed and not unpublished. At most
-- one unpublish of a publication is not failed. The lifecycle columns, RLS and discovery
-- come from prepare_task_table (026_task_tables.sql).

-- +goose Up
SET LOCAL ROLE listing_owner;

ALTER TABLE publications ADD COLUMN unpublished_at timestamptz;
CREATE UNIQUE INDEX publications_first_published ON publications (product_id, store_id)
  WHERE status <> 'failed' AND unpublished_at IS NULL;
DROP INDEX publications_first;

CREATE TABLE unpublishes (
  publication_id      uuid NOT NULL REFERENCES publications (id) ON DELETE CASCADE,
  store_id            uuid NOT NULL REFERENCES stores (id) ON DELETE CASCADE,
  external_product_id text NOT NULL
);
SELECT prepare_task_table('unpublishes');
CREATE INDEX unpublishes_list ON unpublishes (workspace_id, publication_id, created_at DESC, id DESC);
CREATE UNIQUE INDEX unpublishes_one ON unpublishes (publication_id) WHERE status <> 'failed';

RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DELETE FROM task_tables WHERE table_name = 'unpublishes';
DROP TABLE IF EXISTS unpublishes;
-- Before 035 a publication is gone only when failed: an unpublished one (its product may have
-- been published again since) is recorded failed PUBLICATION_UNPUBLISHED, every workspace's
-- rows, RLS relaxed for the owner for this transaction only under the ACCESS EXCLUSIVE lock.
LOCK TABLE publications IN ACCESS EXCLUSIVE MODE;
ALTER TABLE publications NO FORCE ROW LEVEL SECURITY;
UPDATE publications SET status = 'failed', error_code = 'PUBLICATION_UNPUBLISHED',
    error_message = 'the publication was unpublished'
  WHERE unpublished_at IS NOT NULL;
ALTER TABLE publications FORCE ROW LEVEL SECURITY;
CREATE UNIQUE INDEX publications_first ON publications (product_id, store_id) WHERE status <> 'failed';
DROP INDEX IF EXISTS publications_first_published;
ALTER TABLE publications DROP COLUMN IF EXISTS unpublished_at;
RESET ROLE;

-- Task snapshots: a publication and an AI task keep the product content they were requested
-- with, as captured by the command in the transaction that created the task
-- (domain.ProductSnapshot as JSON: revision, title, description, price, currency, images).
-- Workers use it instead of the product's current content, so every delivery of a task works
-- on the same content. Product content only: never credentials or other secrets, and never
-- copied into outbox events (they carry ids and versions only).
--
-- Existing rows are backfilled where the requested content is still known:
--   publications: when the product is still at the requested revision (product_revision);
--   ai_tasks: pending and running ones, with the product's current content (what their next
--     delivery would have read), so that from now on every delivery sends the same request.
-- Other rows keep NULL: finished AI tasks (what they were sent is not known, and no worker
-- needs it), and publications whose product has moved on (their requested content is lost:
-- the worker fails such a publication, if unfinished, with PRODUCT_REVISION_UNAVAILABLE).
-- Workers capture a NULL snapshot themselves on a task's next start, which also covers rows
-- inserted by a binary older than this migration.

-- +goose Up
SET LOCAL ROLE listing_owner;

-- Every lock up front, in the order the commands take them (products, then the task
-- tables), so a publish or AI request running meanwhile waits instead of deadlocking.
LOCK TABLE products, publications, ai_tasks IN ACCESS EXCLUSIVE MODE;

ALTER TABLE publications ADD COLUMN product_snapshot jsonb
  CONSTRAINT publications_snapshot_revision CHECK (product_snapshot IS NULL OR
    (jsonb_typeof(product_snapshot) = 'object' AND (product_snapshot->>'revision')::int = product_revision));
ALTER TABLE ai_tasks ADD COLUMN product_snapshot jsonb
  CONSTRAINT ai_tasks_snapshot_object CHECK (product_snapshot IS NULL OR jsonb_typeof(product_snapshot) = 'object');

-- The backfill reads and writes every workspace's rows. RLS is forced on these tables and the
-- owner role does not bypass it, so it is relaxed for the owner, for this transaction only:
-- ALTER TABLE holds an ACCESS EXCLUSIVE lock until commit, and RLS is forced again below,
-- so no other session ever sees it relaxed.
ALTER TABLE products NO FORCE ROW LEVEL SECURITY;
ALTER TABLE publications NO FORCE ROW LEVEL SECURITY;
ALTER TABLE ai_tasks NO FORCE ROW LEVEL SECURITY;

UPDATE publications pub SET product_snapshot = jsonb_build_object(
    'revision', p.revision, 'title', p.title, 'description', p.description,
    'price', p.price_text, 'currency', p.currency, 'images', p.images)
  FROM products p
  WHERE p.id = pub.product_id AND p.revision = pub.product_revision;

UPDATE ai_tasks t SET product_snapshot = jsonb_build_object(
    'revision', p.revision, 'title', p.title, 'description', p.description,
    'price', p.price_text, 'currency', p.currency, 'images', p.images)
  FROM products p
  WHERE p.id = t.product_id AND t.status IN ('pending', 'running');

ALTER TABLE products FORCE ROW LEVEL SECURITY;
ALTER TABLE publications FORCE ROW LEVEL SECURITY;
ALTER TABLE ai_tasks FORCE ROW LEVEL SECURITY;

RESET ROLE;

-- +goose Down
ALTER TABLE ai_tasks DROP COLUMN IF EXISTS product_snapshot;
ALTER TABLE publications DROP COLUMN IF EXISTS product_snapshot;

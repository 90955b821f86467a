-- Listing updates (docs/http-api.md): after a published product's draft is saved, an
-- update pushes the product's then current revision to its platform product (the gateway's
-- PUT /v1/products/{id}). The update keeps that revision's content (product_snapshot, as
-- domain.ProductSnapshot JSON), captured by the command.
--
-- Ordering on the publication (app/worker/listingupdate explains the rule):
--   pushed_revision    the highest revision the platform is known to hold: set by the first
--                      publish (backfilled below for succeeded publications) and by every
--                      update recorded as pushed; never lowered;
--   sent_revision      the highest revision whose PUT may have been sent (>= pushed_revision);
--   pushing_update_id  the update holding the push claim (NULL: nobody), until
--   pushing_until      the claim's lease.

-- +goose Up
SET LOCAL ROLE listing_owner;

LOCK TABLE publications IN ACCESS EXCLUSIVE MODE;

ALTER TABLE publications
  ADD COLUMN pushed_revision int NOT NULL DEFAULT 0,
  ADD COLUMN sent_revision int NOT NULL DEFAULT 0,
  ADD COLUMN pushing_update_id uuid,
  ADD COLUMN pushing_until timestamptz NOT NULL DEFAULT 'epoch',
  ADD CONSTRAINT publications_sent_revision CHECK (sent_revision >= pushed_revision);

-- The backfill writes every workspace's rows: RLS is relaxed for the owner for this
-- transaction only, under the ACCESS EXCLUSIVE lock (as in 007_task_snapshots.sql).
ALTER TABLE publications NO FORCE ROW LEVEL SECURITY;
UPDATE publications SET pushed_revision = product_revision, sent_revision = product_revision
  WHERE status = 'succeeded';
ALTER TABLE publications FORCE ROW LEVEL SECURITY;

CREATE TABLE listing_updates (
  id               uuid PRIMARY KEY,
  workspace_id     uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  operation_id     uuid NOT NULL REFERENCES operations (id),
  status           text NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
  attempts         int NOT NULL DEFAULT 0,
  reconciliations  int NOT NULL DEFAULT 0,
  error_code       text NOT NULL DEFAULT '',
  error_message    text NOT NULL DEFAULT '' CHECK (length(error_message) <= 500),
  version          int NOT NULL DEFAULT 1,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  publication_id   uuid NOT NULL REFERENCES publications (id) ON DELETE CASCADE,
  product_id       uuid NOT NULL REFERENCES products (id) ON DELETE CASCADE,
  store_id         uuid NOT NULL REFERENCES stores (id) ON DELETE CASCADE,
  product_revision int NOT NULL CHECK (product_revision > 0),
  product_snapshot jsonb NOT NULL CONSTRAINT listing_updates_snapshot_revision CHECK (
    jsonb_typeof(product_snapshot) = 'object' AND (product_snapshot->>'revision')::int = product_revision),
  outcome          text NOT NULL DEFAULT '' CHECK (outcome IN ('', 'pushed', 'superseded'))
);
CREATE INDEX listing_updates_list ON listing_updates (workspace_id, publication_id, created_at DESC, id DESC);
CREATE INDEX listing_updates_unfinished ON listing_updates (updated_at) WHERE status IN ('pending', 'running');

ALTER TABLE listing_updates ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY listing_updates_tenant ON listing_updates
  USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id());

-- The reconciler's discovery (008_reconcile.sql).
GRANT SELECT (workspace_id, status, updated_at) ON listing_updates TO listing_discovery;
CREATE POLICY listing_updates_discovery ON listing_updates FOR SELECT TO listing_discovery USING (true);

RESET ROLE;

-- stuck_task_workspaces gains the listing_updates branch. CREATE OR REPLACE keeps its owner
-- (listing_discovery) and grants; like 008's ALTER FUNCTION … OWNER, it runs as the
-- migrating role, not as listing_owner.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION stuck_task_workspaces(p_before timestamptz, p_limit int)
RETURNS TABLE (workspace_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT s.workspace_id
  FROM (
    SELECT workspace_id, updated_at FROM store_verifications WHERE status IN ('pending', 'running') AND updated_at < p_before
    UNION ALL
    SELECT workspace_id, updated_at FROM media_processings WHERE status IN ('pending', 'running') AND updated_at < p_before
    UNION ALL
    SELECT workspace_id, updated_at FROM material_transfers WHERE status IN ('pending', 'running') AND updated_at < p_before
    UNION ALL
    SELECT workspace_id, updated_at FROM publications WHERE status IN ('pending', 'running') AND updated_at < p_before
    UNION ALL
    SELECT workspace_id, updated_at FROM product_syncs WHERE status IN ('pending', 'running') AND updated_at < p_before
    UNION ALL
    SELECT workspace_id, updated_at FROM ai_tasks WHERE status IN ('pending', 'running') AND updated_at < p_before
    UNION ALL
    SELECT workspace_id, updated_at FROM listing_updates WHERE status IN ('pending', 'running') AND updated_at < p_before
  ) s
  GROUP BY s.workspace_id
  ORDER BY min(s.updated_at), s.workspace_id
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION stuck_task_workspaces(p_before timestamptz, p_limit int)
RETURNS TABLE (workspace_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT s.workspace_id
  FROM (
    SELECT workspace_id, updated_at FROM store_verifications WHERE status IN ('pending', 'running') AND updated_at < p_before
    UNION ALL
    SELECT workspace_id, updated_at FROM media_processings WHERE status IN ('pending', 'running') AND updated_at < p_before
    UNION ALL
    SELECT workspace_id, updated_at FROM material_transfers WHERE status IN ('pending', 'running') AND updated_at < p_before
    UNION ALL
    SELECT workspace_id, updated_at FROM publications WHERE status IN ('pending', 'running') AND updated_at < p_before
    UNION ALL
    SELECT workspace_id, updated_at FROM product_syncs WHERE status IN ('pending', 'running') AND updated_at < p_before
    UNION ALL
    SELECT workspace_id, updated_at FROM ai_tasks WHERE status IN ('pending', 'running') AND updated_at < p_before
  ) s
  GROUP BY s.workspace_id
  ORDER BY min(s.updated_at), s.workspace_id
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd
DROP TABLE IF EXISTS listing_updates;
ALTER TABLE publications DROP CONSTRAINT IF EXISTS publications_sent_revision,
  DROP COLUMN IF EXISTS pushing_until, DROP COLUMN IF EXISTS pushing_update_id,
  DROP COLUMN IF EXISTS sent_revision, DROP COLUMN IF EXISTS pushed_revision;

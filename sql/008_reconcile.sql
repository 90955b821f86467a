-- Reconciliation of stuck tasks: the domain task, not BullMQ, is the source of truth for
-- "done". A task that is neither finished nor moving (its job failed outside a handler, was
-- removed, or was lost with Redis) is found by the reconciler, which publishes its request
-- event again through the outbox and counts it in `reconciliations`; past a bound it fails
-- the task with DELIVERY_EXHAUSTED.
--
-- Discovery follows the outbox's pattern: stuck_task_workspaces, SECURITY DEFINER owned by
-- listing_discovery, returns workspace ids only; the reconciler then works per workspace
-- under RLS as app_user.

-- +goose Up
SET LOCAL ROLE listing_owner;

-- +goose StatementBegin
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['store_verifications', 'media_processings', 'material_transfers',
    'publications', 'product_syncs', 'ai_tasks']
  LOOP
    EXECUTE format('ALTER TABLE %I ADD COLUMN reconciliations int NOT NULL DEFAULT 0', t);
    EXECUTE format('CREATE INDEX %I ON %I (updated_at) WHERE status IN (''pending'', ''running'')',
      t || '_unfinished', t);
  END LOOP;
END
$$;
-- +goose StatementEnd

-- stuck_task_workspaces returns up to p_limit workspaces holding a task that is not finished
-- and was last moved before p_before, the longest-waiting first.
-- +goose StatementBegin
CREATE FUNCTION stuck_task_workspaces(p_before timestamptz, p_limit int)
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

RESET ROLE;

-- +goose StatementBegin
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['store_verifications', 'media_processings', 'material_transfers',
    'publications', 'product_syncs', 'ai_tasks']
  LOOP
    EXECUTE format('GRANT SELECT (workspace_id, status, updated_at) ON %I TO listing_discovery', t);
    EXECUTE format('CREATE POLICY %I ON %I FOR SELECT TO listing_discovery USING (true)', t || '_discovery', t);
  END LOOP;
END
$$;
-- +goose StatementEnd

ALTER FUNCTION stuck_task_workspaces(timestamptz, int) OWNER TO listing_discovery;
REVOKE ALL ON FUNCTION stuck_task_workspaces(timestamptz, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION stuck_task_workspaces(timestamptz, int) TO app_user;

-- +goose Down
DROP FUNCTION IF EXISTS stuck_task_workspaces(timestamptz, int);
-- +goose StatementBegin
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['store_verifications', 'media_processings', 'material_transfers',
    'publications', 'product_syncs', 'ai_tasks']
  LOOP
    EXECUTE format('DROP POLICY IF EXISTS %I ON %I', t || '_discovery', t);
    EXECUTE format('REVOKE SELECT ON %I FROM listing_discovery', t);
    EXECUTE format('DROP INDEX IF EXISTS %I', t || '_unfinished');
    EXECUTE format('ALTER TABLE %I DROP COLUMN IF EXISTS reconciliations', t);
  END LOOP;
END
$$;
-- +goose StatementEnd

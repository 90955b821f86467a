-- The task lifecycle's SQL is the engine's. A flow's migration creates its task table with
-- its own domain columns only, then calls prepare_task_table, which gives the table what
-- every task table has (domain.Task and the engine around it):
--   the lifecycle columns  id, workspace_id, operation_id, status, attempts, reconciliations,
--                          error_code, error_message (<= 500 characters), version,
--                          created_at, updated_at (added when missing; a column of that
--                          name but another type is refused),
--   RLS                    enabled and forced, with the <table>_tenant policy on
--                          app_workspace_id(),
--   <table>_unfinished     the partial index of unfinished tasks by updated_at,
--   discovery              SELECT (workspace_id, status, updated_at) for listing_discovery
--                          and its <table>_discovery policy,
--   task_tables            the registry of task tables, which stuck_task_workspaces reads.
-- prepare_task_table is idempotent: this migration runs it on the seven existing task
-- tables, which change in nothing but their row in task_tables (no row of theirs is
-- rewritten or lost).
--
-- stuck_task_workspaces (008_reconcile.sql) no longer names the tables: it reads them from
-- task_tables, so a new flow never rewrites it. Same signature, owner (listing_discovery)
-- and grantees; listing_discovery may read task_tables, app_user may not touch it.

-- +goose Up
SET LOCAL ROLE listing_owner;

CREATE TABLE task_tables (
  table_name text PRIMARY KEY CHECK (table_name ~ '^[a-z_][a-z0-9_]*$'),
  created_at timestamptz NOT NULL DEFAULT now()
);
-- The default privileges give app_user every table listing_owner creates: not this one.
REVOKE ALL ON task_tables FROM app_user;
GRANT SELECT (table_name) ON task_tables TO listing_discovery;

-- prepare_task_table makes p_table (in the public schema, owned by the caller) a task
-- table, as described above. It runs with the caller's rights: only the tables' owner, in
-- a migration, can use it; nobody else may execute it.
-- +goose StatementBegin
CREATE FUNCTION prepare_task_table(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  rel regclass := format('public.%I', p_table)::regclass;
  want constant text[][] := ARRAY[
    ['id', 'uuid'], ['workspace_id', 'uuid'], ['operation_id', 'uuid'], ['status', 'text'],
    ['attempts', 'integer'], ['reconciliations', 'integer'], ['error_code', 'text'],
    ['error_message', 'text'], ['version', 'integer'], ['created_at', 'timestamp with time zone'],
    ['updated_at', 'timestamp with time zone']];
  got text;
  not_null boolean;
BEGIN
  EXECUTE format($f$ALTER TABLE %s
    ADD COLUMN IF NOT EXISTS id uuid PRIMARY KEY,
    ADD COLUMN IF NOT EXISTS workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    ADD COLUMN IF NOT EXISTS operation_id uuid NOT NULL REFERENCES operations (id),
    ADD COLUMN IF NOT EXISTS status text NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
    ADD COLUMN IF NOT EXISTS attempts int NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS reconciliations int NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS error_code text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS error_message text NOT NULL DEFAULT '' CHECK (length(error_message) <= 500),
    ADD COLUMN IF NOT EXISTS version int NOT NULL DEFAULT 1,
    ADD COLUMN IF NOT EXISTS created_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN IF NOT EXISTS updated_at timestamptz NOT NULL DEFAULT now()$f$, rel);
  FOR i IN 1 .. array_length(want, 1) LOOP
    SELECT format_type(a.atttypid, a.atttypmod), a.attnotnull INTO got, not_null
    FROM pg_attribute a WHERE a.attrelid = rel AND a.attname = want[i][1] AND NOT a.attisdropped;
    IF got IS DISTINCT FROM want[i][2] OR NOT not_null THEN
      RAISE EXCEPTION 'task table %: column % is % (the lifecycle wants % NOT NULL)', p_table, want[i][1],
        coalesce(got, 'missing') || CASE WHEN not_null THEN ' NOT NULL' ELSE '' END, want[i][2];
    END IF;
  END LOOP;

  EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', rel);
  IF NOT EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = rel AND polname = p_table || '_tenant') THEN
    EXECUTE format('CREATE POLICY %I ON %s USING (workspace_id = app_workspace_id()) WITH CHECK (workspace_id = app_workspace_id())',
      p_table || '_tenant', rel);
  END IF;
  EXECUTE format($f$CREATE INDEX IF NOT EXISTS %I ON %s (updated_at) WHERE status IN ('pending', 'running')$f$,
    p_table || '_unfinished', rel);
  EXECUTE format('GRANT SELECT (workspace_id, status, updated_at) ON %s TO listing_discovery', rel);
  IF NOT EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = rel AND polname = p_table || '_discovery') THEN
    EXECUTE format('CREATE POLICY %I ON %s FOR SELECT TO listing_discovery USING (true)', p_table || '_discovery', rel);
  END IF;
  INSERT INTO task_tables (table_name) VALUES (p_table) ON CONFLICT DO NOTHING;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION prepare_task_table(text) FROM PUBLIC;

SELECT prepare_task_table(t) FROM unnest(ARRAY['store_verifications', 'media_processings', 'material_transfers',
  'publications', 'product_syncs', 'ai_tasks', 'listing_updates']) t;

RESET ROLE;

-- stuck_task_workspaces returns up to p_limit workspaces holding a task, in any table of
-- task_tables, that is not finished and was last moved before p_before, the longest-waiting
-- first. The table names come from task_tables, which only listing_owner writes.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION stuck_task_workspaces(p_before timestamptz, p_limit int)
RETURNS TABLE (workspace_id uuid)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  branches text;
BEGIN
  SELECT string_agg(format($f$SELECT workspace_id, updated_at FROM public.%I
      WHERE status IN ('pending', 'running') AND updated_at < $1$f$, t.table_name), ' UNION ALL ' ORDER BY t.table_name)
    INTO branches FROM task_tables t;
  IF branches IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY EXECUTE format('SELECT s.workspace_id FROM (%s) s GROUP BY s.workspace_id
    ORDER BY min(s.updated_at), s.workspace_id LIMIT least(greatest($2, 0), 10000)', branches)
    USING p_before, p_limit;
END
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
    UNION ALL
    SELECT workspace_id, updated_at FROM listing_updates WHERE status IN ('pending', 'running') AND updated_at < p_before
  ) s
  GROUP BY s.workspace_id
  ORDER BY min(s.updated_at), s.workspace_id
  LIMIT least(greatest(p_limit, 0), 10000)
$$;
-- +goose StatementEnd
DROP FUNCTION IF EXISTS prepare_task_table(text);
DROP TABLE IF EXISTS task_tables;

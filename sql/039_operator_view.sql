-- The operators' view of failures and workspaces across workspaces (docs/operations.md, "The
-- operator console"): read only by listing_operator, through SECURITY DEFINER functions owned
-- by listing_inspector (011_operator_console.sql), like the console's other reads.
--
-- operations.progress and progress_at: how far a running operation's long work went
-- ({"done": n, "total": m or null}), written at most once a second; neither column is indexed,
-- so the write stays a HOT update. operator_operation returns them too.
--
-- Every task table, those registered by prepare_task_table (026_task_tables.sql) from now on
-- included (a trigger on task_tables), gets
--   <table>_failed      a partial index of failed tasks, latest first: a task enters it once,
--                       when it fails, so the lifecycle's other updates pay nothing for it;
--   <table>_inspector   listing_inspector may read the lifecycle columns the functions below
--                       return, through a policy of its own.
--
--   operator_failures        failed tasks of every workspace, latest first, by page; filters:
--                            one task table, one error code, a time since which
--   operator_workspaces      the workspaces with the most unfinished tasks and failures
--   operator_workspace_flows one workspace's unfinished and failed tasks per task table
--   operator_recent_operations one workspace's latest operations
--   operator_outbox_delivered  events delivered per minute and destination, from the log
--                            of dispatched events, over a BRIN index of dispatched_at (the
--                            log is insert-only in time order: a few pages per partition)

-- +goose Up
SET LOCAL ROLE listing_owner;

ALTER TABLE operations
  ADD COLUMN progress jsonb CHECK (progress IS NULL OR jsonb_typeof(progress) = 'object'),
  ADD COLUMN progress_at timestamptz;

-- prepare_task_inspection gives task table p_table its <table>_failed index and what
-- listing_inspector may read of it. It runs with its caller's rights (the tables' owner);
-- nobody else may execute it. The trigger below runs it on every table prepare_task_table
-- (026_task_tables.sql) registers from now on; this migration runs it on those registered.
-- +goose StatementBegin
CREATE FUNCTION prepare_task_inspection(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  rel regclass := format('public.%I', p_table)::regclass;
BEGIN
  EXECUTE format($f$CREATE INDEX IF NOT EXISTS %I ON %s (updated_at DESC, id DESC) WHERE status = 'failed'$f$,
    p_table || '_failed', rel);
  EXECUTE format('GRANT SELECT (id, workspace_id, operation_id, status, attempts, reconciliations, error_code, updated_at) ON %s TO listing_inspector', rel);
  IF NOT EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = rel AND polname = p_table || '_inspector') THEN
    EXECUTE format('CREATE POLICY %I ON %s FOR SELECT TO listing_inspector USING (true)', p_table || '_inspector', rel);
  END IF;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION prepare_task_inspection(text) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION task_tables_inspection() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM prepare_task_inspection(NEW.table_name);
  RETURN NEW;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_tables_inspection() FROM PUBLIC;
CREATE TRIGGER task_tables_inspection AFTER INSERT ON task_tables
  FOR EACH ROW EXECUTE FUNCTION task_tables_inspection();

SELECT prepare_task_inspection(table_name) FROM task_tables;

RESET ROLE;
GRANT SELECT (table_name) ON task_tables TO listing_inspector;
GRANT SELECT (id, name) ON workspaces TO listing_inspector;
CREATE POLICY workspaces_inspector ON workspaces FOR SELECT TO listing_inspector USING (true);
SET LOCAL ROLE listing_owner;
CREATE INDEX outbox_dispatched_at ON outbox_dispatched USING brin (dispatched_at);
RESET ROLE;
GRANT SELECT (destination, created_at, dispatched_at) ON outbox_dispatched TO listing_inspector;
CREATE POLICY outbox_dispatched_inspector ON outbox_dispatched FOR SELECT TO listing_inspector USING (true);

-- operator_outbox_delivered returns, per minute (UTC, truncated) from p_since and destination,
-- the events delivered and the slowest commit → delivery of that minute.
-- +goose StatementBegin
CREATE FUNCTION operator_outbox_delivered(p_since timestamptz)
RETURNS TABLE (minute timestamptz, destination text, events bigint, max_latency interval)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT date_trunc('minute', d.dispatched_at), d.destination, count(*), max(d.dispatched_at - d.created_at)
  FROM outbox_dispatched d
  WHERE d.dispatched_at >= greatest(p_since, now() - interval '1 day')
  GROUP BY 1, 2
  ORDER BY 1, 2
$$;
-- +goose StatementEnd

-- operator_failures returns failed tasks, the latest first: those of table p_table (NULL:
-- every task table), of error code p_code (NULL: any), that failed at or after p_since and
-- before the page's key (p_before_at, p_before_id) (NULLs: the first page), at most p_limit
-- (<= 200), each with its operation (without its result).
-- +goose StatementBegin
CREATE FUNCTION operator_failures(p_table text, p_code text, p_since timestamptz,
                                  p_before_at timestamptz, p_before_id uuid, p_limit int)
RETURNS TABLE (task_table text, task_id uuid, attempts int, reconciliations int, failed_at timestamptz,
               id uuid, workspace_id uuid, type text, status text, resource_type text, resource_id uuid,
               error_code text, error_message text, created_at timestamptz, updated_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  n constant int := least(greatest(p_limit, 0), 200);
  branches text;
BEGIN
  SELECT string_agg(format($f$(SELECT %L::text AS task_table, t.id, t.operation_id, t.attempts, t.reconciliations,
        t.error_code, t.updated_at FROM public.%I t
      WHERE t.status = 'failed' AND t.updated_at >= $3 AND ($2::text IS NULL OR t.error_code = $2)
        AND ($4::timestamptz IS NULL OR (t.updated_at, t.id) < ($4, $5))
      ORDER BY t.updated_at DESC, t.id DESC LIMIT $6)$f$, x.table_name, x.table_name), ' UNION ALL ' ORDER BY x.table_name)
    INTO branches FROM task_tables x WHERE p_table IS NULL OR x.table_name = p_table;
  IF branches IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY EXECUTE format($f$SELECT f.task_table, f.id, f.attempts, f.reconciliations, f.updated_at,
      p.id, p.workspace_id, p.type, p.status, p.resource_type, p.resource_id,
      CASE WHEN p.error_code <> '' THEN p.error_code ELSE f.error_code END, p.error_message, p.created_at, p.updated_at
    FROM (%s) f JOIN operations p ON p.id = f.operation_id
    ORDER BY f.updated_at DESC, f.id DESC LIMIT $6$f$, branches)
    USING p_table, p_code, coalesce(p_since, '-infinity'::timestamptz), p_before_at, p_before_id, n;
END
$$;
-- +goose StatementEnd

-- operator_workspaces returns up to p_limit (<= 500) workspaces holding unfinished tasks or
-- tasks failed at or after p_since, the largest backlog first, then the most failures.
-- +goose StatementBegin
CREATE FUNCTION operator_workspaces(p_since timestamptz, p_limit int)
RETURNS TABLE (workspace_id uuid, name text, unfinished bigint, failed bigint, oldest_unfinished_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  branches text;
BEGIN
  SELECT string_agg(format($f$SELECT t.workspace_id, t.status, t.updated_at FROM public.%I t
      WHERE t.status IN ('pending', 'running') OR (t.status = 'failed' AND t.updated_at >= $1)$f$, x.table_name),
      ' UNION ALL ' ORDER BY x.table_name)
    INTO branches FROM task_tables x;
  IF branches IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY EXECUTE format($f$SELECT s.workspace_id, w.name,
      count(*) FILTER (WHERE s.status <> 'failed'), count(*) FILTER (WHERE s.status = 'failed'),
      min(s.updated_at) FILTER (WHERE s.status <> 'failed')
    FROM (%s) s JOIN workspaces w ON w.id = s.workspace_id
    GROUP BY s.workspace_id, w.name
    ORDER BY 3 DESC, 4 DESC, s.workspace_id LIMIT least(greatest($2, 0), 500)$f$, branches)
    USING coalesce(p_since, '-infinity'::timestamptz), p_limit;
END
$$;
-- +goose StatementEnd

-- operator_workspace_flows returns, for workspace p_workspace, one row per task table with
-- its unfinished tasks (pending, running), the oldest one's last move, and its tasks failed at
-- or after p_since.
-- +goose StatementBegin
CREATE FUNCTION operator_workspace_flows(p_workspace uuid, p_since timestamptz)
RETURNS TABLE (task_table text, pending bigint, running bigint, failed bigint, oldest_unfinished_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  branches text;
BEGIN
  SELECT string_agg(format($f$SELECT %L::text, count(*) FILTER (WHERE t.status = 'pending'),
        count(*) FILTER (WHERE t.status = 'running'), count(*) FILTER (WHERE t.status = 'failed'),
        min(t.updated_at) FILTER (WHERE t.status <> 'failed')
      FROM public.%I t WHERE t.workspace_id = $1
        AND (t.status IN ('pending', 'running') OR (t.status = 'failed' AND t.updated_at >= $2))$f$,
      x.table_name, x.table_name), ' UNION ALL ' ORDER BY x.table_name)
    INTO branches FROM task_tables x;
  IF branches IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY EXECUTE branches USING p_workspace, coalesce(p_since, '-infinity'::timestamptz);
END
$$;
-- +goose StatementEnd

-- operator_operation (011_operator_console.sql) returns the operation's progress too.
DROP FUNCTION operator_operation(uuid);
-- +goose StatementBegin
CREATE FUNCTION operator_operation(p_id uuid)
RETURNS TABLE (id uuid, workspace_id uuid, type text, status text, resource_type text, resource_id uuid,
               error_code text, error_message text, created_at timestamptz, updated_at timestamptz,
               progress jsonb, progress_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT p.id, p.workspace_id, p.type, p.status, p.resource_type, p.resource_id, p.error_code, p.error_message,
         p.created_at, p.updated_at, p.progress, p.progress_at
  FROM operations p WHERE p.id = p_id
$$;
-- +goose StatementEnd
GRANT SELECT (progress, progress_at) ON operations TO listing_inspector;

-- operator_recent_operations returns the latest operations of workspace p_workspace, at most
-- p_limit (<= 200), without their results.
-- +goose StatementBegin
CREATE FUNCTION operator_recent_operations(p_workspace uuid, p_limit int)
RETURNS TABLE (id uuid, workspace_id uuid, type text, status text, resource_type text, resource_id uuid,
               error_code text, error_message text, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT p.id, p.workspace_id, p.type, p.status, p.resource_type, p.resource_id, p.error_code, p.error_message,
         p.created_at, p.updated_at
  FROM operations p
  WHERE p.workspace_id = p_workspace
  ORDER BY p.created_at DESC, p.id DESC
  LIMIT least(greatest(p_limit, 0), 200)
$$;
-- +goose StatementEnd

ALTER FUNCTION operator_recent_operations(uuid, int) OWNER TO listing_inspector;
ALTER FUNCTION operator_operation(uuid) OWNER TO listing_inspector;
ALTER FUNCTION operator_outbox_delivered(timestamptz) OWNER TO listing_inspector;
ALTER FUNCTION operator_failures(text, text, timestamptz, timestamptz, uuid, int) OWNER TO listing_inspector;
ALTER FUNCTION operator_workspaces(timestamptz, int) OWNER TO listing_inspector;
ALTER FUNCTION operator_workspace_flows(uuid, timestamptz) OWNER TO listing_inspector;
REVOKE ALL ON FUNCTION operator_failures(text, text, timestamptz, timestamptz, uuid, int),
  operator_workspaces(timestamptz, int), operator_workspace_flows(uuid, timestamptz),
  operator_recent_operations(uuid, int), operator_outbox_delivered(timestamptz), operator_operation(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operator_failures(text, text, timestamptz, timestamptz, uuid, int),
  operator_workspaces(timestamptz, int), operator_workspace_flows(uuid, timestamptz),
  operator_recent_operations(uuid, int), operator_outbox_delivered(timestamptz), operator_operation(uuid) TO listing_operator;

-- +goose Down
DROP FUNCTION IF EXISTS operator_operation(uuid);
-- +goose StatementBegin
CREATE FUNCTION operator_operation(p_id uuid)
RETURNS TABLE (id uuid, workspace_id uuid, type text, status text, resource_type text, resource_id uuid,
               error_code text, error_message text, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT p.id, p.workspace_id, p.type, p.status, p.resource_type, p.resource_id, p.error_code, p.error_message,
         p.created_at, p.updated_at
  FROM operations p WHERE p.id = p_id
$$;
-- +goose StatementEnd
ALTER FUNCTION operator_operation(uuid) OWNER TO listing_inspector;
REVOKE ALL ON FUNCTION operator_operation(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operator_operation(uuid) TO listing_operator;
REVOKE SELECT (progress, progress_at) ON operations FROM listing_inspector;
DROP FUNCTION IF EXISTS operator_outbox_delivered(timestamptz);
DROP POLICY IF EXISTS outbox_dispatched_inspector ON outbox_dispatched;
REVOKE SELECT (destination, created_at, dispatched_at) ON outbox_dispatched FROM listing_inspector;
SET LOCAL ROLE listing_owner;
DROP INDEX IF EXISTS outbox_dispatched_at;
RESET ROLE;
DROP FUNCTION IF EXISTS operator_recent_operations(uuid, int);
DROP FUNCTION IF EXISTS operator_workspace_flows(uuid, timestamptz);
DROP FUNCTION IF EXISTS operator_workspaces(timestamptz, int);
DROP FUNCTION IF EXISTS operator_failures(text, text, timestamptz, timestamptz, uuid, int);
DROP POLICY IF EXISTS workspaces_inspector ON workspaces;
REVOKE SELECT (id, name) ON workspaces FROM listing_inspector;
REVOKE SELECT (table_name) ON task_tables FROM listing_inspector;
SET LOCAL ROLE listing_owner;
-- +goose StatementBegin
DO $$
DECLARE
  t text;
BEGIN
  FOR t IN SELECT table_name FROM task_tables LOOP
    EXECUTE format('DROP POLICY IF EXISTS %I ON public.%I', t || '_inspector', t);
    EXECUTE format('REVOKE SELECT (id, workspace_id, operation_id, status, attempts, reconciliations, error_code, updated_at) ON public.%I FROM listing_inspector', t);
    EXECUTE format('DROP INDEX IF EXISTS public.%I', t || '_failed');
  END LOOP;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS task_tables_inspection ON task_tables;
DROP FUNCTION IF EXISTS task_tables_inspection();
DROP FUNCTION IF EXISTS prepare_task_inspection(text);
ALTER TABLE operations DROP COLUMN IF EXISTS progress, DROP COLUMN IF EXISTS progress_at;
RESET ROLE;

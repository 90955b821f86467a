-- A workspace's stores with work waiting for them, for the console's workspace page
-- (docs/operations.md, "The operator console"): per store, its unfinished tasks across the task
-- tables that name a store (a store_id column), and the store's own rate limit, from which the
-- console tells when a rate-limited shop's backlog is expected to end. Read only by
-- listing_operator, through a SECURITY DEFINER function owned by listing_inspector, like the
-- console's other reads (039_operator_view.sql, 057_operator_backlogs.sql); ids, names and
-- counts, no credentials.
--
--   operator_store_backlogs  for workspace p_workspace, one row per store with pending or
--                            running tasks: its name, platform, own budget (0: its platform's),
--                            and the tasks; over each table's <table>_unfinished index
--
-- listing_inspector may read a task table's store_id: granted here on the tables registered,
-- and by the trigger below on those registered from now on (026_task_tables.sql).

-- +goose Up
SET LOCAL ROLE listing_owner;

-- +goose StatementBegin
CREATE FUNCTION prepare_task_store_inspection(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  rel regclass := format('public.%I', p_table)::regclass;
BEGIN
  IF EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = rel AND a.attname = 'store_id' AND NOT a.attisdropped) THEN
    EXECUTE format('GRANT SELECT (store_id) ON %s TO listing_inspector', rel);
  END IF;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION prepare_task_store_inspection(text) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION task_tables_store_inspection() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM prepare_task_store_inspection(NEW.table_name);
  RETURN NEW;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_tables_store_inspection() FROM PUBLIC;
CREATE TRIGGER task_tables_store_inspection AFTER INSERT ON task_tables
  FOR EACH ROW EXECUTE FUNCTION task_tables_store_inspection();

SELECT prepare_task_store_inspection(table_name) FROM task_tables;
RESET ROLE;

GRANT SELECT (id, workspace_id, name, platform, rate_per_second, rate_burst) ON stores TO listing_inspector;
CREATE POLICY stores_inspector ON stores FOR SELECT TO listing_inspector USING (true);

-- +goose StatementBegin
CREATE FUNCTION operator_store_backlogs(p_workspace uuid)
RETURNS TABLE (store_id uuid, name text, platform text, rate_per_second double precision, rate_burst int,
  pending bigint, running bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  branches text;
BEGIN
  SELECT string_agg(format($f$SELECT t.store_id, count(*) FILTER (WHERE t.status = 'pending') AS pending,
        count(*) FILTER (WHERE t.status = 'running') AS running
      FROM public.%I t WHERE t.workspace_id = $1 AND t.status IN ('pending', 'running') GROUP BY t.store_id$f$,
      x.table_name), ' UNION ALL ' ORDER BY x.table_name)
    INTO branches
    FROM task_tables x
    WHERE EXISTS (SELECT 1 FROM pg_attribute a
      WHERE a.attrelid = format('public.%I', x.table_name)::regclass AND a.attname = 'store_id' AND NOT a.attisdropped);
  IF branches IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY EXECUTE format($f$SELECT s.id, s.name, s.platform, s.rate_per_second, s.rate_burst,
      sum(f.pending)::bigint, sum(f.running)::bigint
    FROM (%s) f JOIN stores s ON s.id = f.store_id AND s.workspace_id = $1
    GROUP BY s.id, s.name, s.platform, s.rate_per_second, s.rate_burst
    ORDER BY 6 DESC, 7 DESC, 1
    LIMIT 100$f$, branches)
    USING p_workspace;
END
$$;
-- +goose StatementEnd
ALTER FUNCTION operator_store_backlogs(uuid) OWNER TO listing_inspector;
REVOKE ALL ON FUNCTION operator_store_backlogs(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operator_store_backlogs(uuid) TO listing_operator;

-- +goose Down
DROP FUNCTION IF EXISTS operator_store_backlogs(uuid);
DROP POLICY IF EXISTS stores_inspector ON stores;
REVOKE SELECT (id, workspace_id, name, platform, rate_per_second, rate_burst) ON stores FROM listing_inspector;
SET LOCAL ROLE listing_owner;
DROP TRIGGER IF EXISTS task_tables_store_inspection ON task_tables;
DROP FUNCTION IF EXISTS task_tables_store_inspection();
-- +goose StatementBegin
DO $$
DECLARE
  t text;
BEGIN
  FOR t IN SELECT x.table_name FROM task_tables x
      WHERE EXISTS (SELECT 1 FROM pg_attribute a
        WHERE a.attrelid = format('public.%I', x.table_name)::regclass AND a.attname = 'store_id' AND NOT a.attisdropped) LOOP
    EXECUTE format('REVOKE SELECT (store_id) ON public.%I FROM listing_inspector', t);
  END LOOP;
END
$$;
-- +goose StatementEnd
DROP FUNCTION IF EXISTS prepare_task_store_inspection(text);
RESET ROLE;

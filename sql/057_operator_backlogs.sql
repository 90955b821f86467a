-- The console's largest backlogs (docs/operations.md, "The operator console"): the workspaces
-- with the most tasks waiting, per flow, and what fair share holds back of them. Read only by
-- listing_operator, through SECURITY DEFINER functions owned by listing_inspector, like the
-- console's other reads (039_operator_view.sql, 050_overview.sql); counts and ids, no payload.
--
--   operator_backlogs       up to p_limit workspaces, the most pending tasks first: one row per
--                           workspace and task table with unfinished tasks (pending, running),
--                           the oldest pending task's last move; over each table's
--                           <table>_unfinished index (026_task_tables.sql)
--   operator_held_backlogs  for the workspaces p_workspaces (NULL: every workspace, summed per
--                           queue), the request events fair share holds in the outbox per
--                           queue (status 'held') and the oldest one's commit; over
--                           outbox_events_held (053_outbox_fair_share.sql), whose rows leave
--                           it as they are admitted
--
-- No index is added: both walk partial indexes that hold only the unfinished tasks and the
-- held events, so a page costs what is waiting, and the service's writes pay nothing more.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION operator_backlogs(p_limit int)
RETURNS TABLE (workspace_id uuid, name text, task_table text, pending bigint, running bigint, oldest_pending_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  branches text;
BEGIN
  SELECT string_agg(format($f$SELECT %L::text AS task_table, t.workspace_id, count(*) FILTER (WHERE t.status = 'pending') AS pending,
        count(*) FILTER (WHERE t.status = 'running') AS running, min(t.updated_at) FILTER (WHERE t.status = 'pending') AS oldest
      FROM public.%I t WHERE t.status IN ('pending', 'running') GROUP BY t.workspace_id$f$, x.table_name, x.table_name),
      ' UNION ALL ' ORDER BY x.table_name)
    INTO branches FROM task_tables x;
  IF branches IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY EXECUTE format($f$WITH f AS (%s),
      top AS (SELECT f.workspace_id, sum(f.pending) AS pending, sum(f.running) AS running, min(f.oldest) AS oldest
              FROM f GROUP BY f.workspace_id
              ORDER BY 2 DESC, 3 DESC, 4, 1 LIMIT least(greatest($1, 0), 100))
    SELECT f.workspace_id, w.name, f.task_table, f.pending, f.running, f.oldest
    FROM top JOIN f ON f.workspace_id = top.workspace_id JOIN workspaces w ON w.id = top.workspace_id
    ORDER BY top.pending DESC, top.running DESC, top.oldest, top.workspace_id, f.pending DESC, f.task_table$f$, branches)
    USING p_limit;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION operator_held_backlogs(p_workspaces uuid[])
RETURNS TABLE (workspace_id uuid, destination text, held bigint, oldest_held_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT CASE WHEN p_workspaces IS NULL THEN NULL ELSE o.workspace_id END, o.destination, count(*), min(o.created_at)
  FROM outbox_events o
  WHERE o.status = 'held' AND (p_workspaces IS NULL OR o.workspace_id = ANY (p_workspaces))
  GROUP BY 1, 2
$$;
-- +goose StatementEnd

ALTER FUNCTION operator_backlogs(int) OWNER TO listing_inspector;
ALTER FUNCTION operator_held_backlogs(uuid[]) OWNER TO listing_inspector;
REVOKE ALL ON FUNCTION operator_backlogs(int), operator_held_backlogs(uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION operator_backlogs(int), operator_held_backlogs(uuid[]) TO listing_operator;

-- +goose Down
DROP FUNCTION IF EXISTS operator_held_backlogs(uuid[]);
DROP FUNCTION IF EXISTS operator_backlogs(int);

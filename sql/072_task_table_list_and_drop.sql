-- A flow's migration names its task table's list and its Down through the engine:
--   prepare_task_table(table, list_by)  prepare_task_table(table) (026), then the index of
--                                       the table's tasks listed under their parent, newest
--                                       first: <table>_list ON (workspace_id, <list_by>,
--                                       created_at DESC, id DESC), what the API's task
--                                       resource reads (list_by: the parent's column).
--   drop_task_table(table)              the Down of a flow's task table: the guards the flow
--                                       declared (task_guards rows whose except_table is
--                                       the table), its row in task_tables, the table.
-- Both run with the caller's rights (the tables' owner, in a migration); nobody else may
-- execute them.

-- +goose Up
SET LOCAL ROLE listing_owner;

-- +goose StatementBegin
CREATE FUNCTION prepare_task_table(p_table text, p_list_by text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM prepare_task_table(p_table);
  EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON public.%I (workspace_id, %I, created_at DESC, id DESC)',
    p_table || '_list', p_table, p_list_by);
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION prepare_task_table(text, text) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION drop_task_table(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  DELETE FROM task_guards WHERE except_table = p_table;
  DELETE FROM task_tables WHERE table_name = p_table;
  EXECUTE format('DROP TABLE IF EXISTS public.%I', p_table);
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION drop_task_table(text) FROM PUBLIC;

RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP FUNCTION IF EXISTS drop_task_table(text);
DROP FUNCTION IF EXISTS prepare_task_table(text, text);
RESET ROLE;

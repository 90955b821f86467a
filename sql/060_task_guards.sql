-- Declared guards: what must hold of an aggregate for any task touching it to start or run
-- (docs/adding-a-flow.md, "Guards"). A flow that changes what other flows may do declares a
-- guard in its own migration (a row of task_guards) instead of editing their commands and
-- workers; the engine checks every guard
--   at acceptance   an AFTER INSERT trigger on every task table (those registered by
--                   prepare_task_table from now on included, through a trigger on
--                   task_tables) refuses the insert of a task whose row names an aggregate
--                   (task_column) on which the guard does not hold: the command's
--                   transaction fails with the guard's error code (SQLSTATE LKG01, the
--                   message is the code; infra/postgres maps it to the domain error);
--   when it runs    the begin step of every delivery (worker.Deps.Guards) runs the same
--                   check_task_guards on the task's row and fails the task with that error.
-- The check locks the aggregate's row FOR KEY SHARE, so that a flow changing the aggregate
-- under FOR UPDATE (a disconnection) and a task starting beside it are serialized.
-- task_unfinished(column, id) counts the pending or running tasks, in every task table with
-- that column, of one aggregate (a flow that must wait for the others: STORE_BUSY).

-- +goose Up
SET LOCAL ROLE listing_owner;

CREATE TABLE task_guards (
  name            text PRIMARY KEY,
  aggregate_table text NOT NULL CHECK (aggregate_table ~ '^[a-z_][a-z0-9_]*$'),
  task_column     text NOT NULL CHECK (task_column ~ '^[a-z_][a-z0-9_]*$'),
  -- holds is an SQL condition on the aggregate's row (alias a).
  holds           text NOT NULL,
  error_code      text NOT NULL CHECK (error_code ~ '^[A-Z][A-Z0-9_]*$'),
  -- except_table is the declaring flow's own task table, which the guard does not bind.
  except_table    text
);
REVOKE ALL ON task_guards FROM app_user;
GRANT SELECT ON task_guards TO app_user;
-- Declarations, the same for every workspace: readable by all, written in migrations only.
ALTER TABLE task_guards ENABLE ROW LEVEL SECURITY;
ALTER TABLE task_guards FORCE ROW LEVEL SECURITY;
CREATE POLICY task_guards_read ON task_guards FOR SELECT USING (true);
CREATE POLICY task_guards_owner ON task_guards TO listing_owner USING (true) WITH CHECK (true);

-- check_task_guards raises LKG01 (message: the error code) when a guard does not hold of an
-- aggregate that p_task, a row of task table p_table, names. Caller's rights, under RLS.
-- +goose StatementBegin
CREATE FUNCTION check_task_guards(p_table text, p_task jsonb) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  g task_guards;
  ok boolean;
BEGIN
  FOR g IN SELECT * FROM task_guards WHERE p_task ? task_column AND except_table IS DISTINCT FROM p_table ORDER BY name LOOP
    CONTINUE WHEN p_task ->> g.task_column IS NULL;
    EXECUTE format('SELECT (%s) FROM public.%I a WHERE a.id = $1 FOR KEY SHARE OF a', g.holds, g.aggregate_table)
      INTO ok USING (p_task ->> g.task_column)::uuid;
    IF ok IS NOT TRUE THEN
      RAISE EXCEPTION USING ERRCODE = 'LKG01', MESSAGE = g.error_code,
        DETAIL = format('guard %s on %s', g.name, p_table);
    END IF;
  END LOOP;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION check_task_guards(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION check_task_guards(text, jsonb) TO app_user;

-- +goose StatementBegin
CREATE FUNCTION task_guards_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM check_task_guards(TG_TABLE_NAME, to_jsonb(NEW));
  RETURN NULL;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_guards_insert() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION task_guards_insert() TO app_user;

-- task_unfinished counts the pending or running tasks whose p_column is p_id, in every task
-- table that has p_column: a count, of the caller's workspace only (the tables' RLS, forced,
-- binds their owner too). A definer because app_user may not read task_tables.
-- +goose StatementBegin
CREATE FUNCTION task_unfinished(p_column text, p_id uuid) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  t text;
  n bigint;
  total bigint := 0;
BEGIN
  FOR t IN SELECT tt.table_name FROM task_tables tt JOIN pg_attribute a
      ON a.attrelid = format('public.%I', tt.table_name)::regclass AND a.attname = p_column AND NOT a.attisdropped LOOP
    EXECUTE format('SELECT count(*) FROM public.%I WHERE %I = $1 AND status IN (''pending'', ''running'')', t, p_column)
      INTO n USING p_id;
    total := total + n;
  END LOOP;
  RETURN total;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_unfinished(text, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION task_unfinished(text, uuid) TO app_user;

-- prepare_task_guards gives task table p_table the guards' trigger. Caller's rights.
-- +goose StatementBegin
CREATE FUNCTION prepare_task_guards(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  rel regclass := format('public.%I', p_table)::regclass;
BEGIN
  EXECUTE format('DROP TRIGGER IF EXISTS task_guards ON %s', rel);
  EXECUTE format('CREATE TRIGGER task_guards AFTER INSERT ON %s FOR EACH ROW EXECUTE FUNCTION task_guards_insert()', rel);
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION prepare_task_guards(text) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION task_tables_guards() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM prepare_task_guards(NEW.table_name);
  RETURN NEW;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_tables_guards() FROM PUBLIC;
CREATE TRIGGER task_tables_guards AFTER INSERT ON task_tables
  FOR EACH ROW EXECUTE FUNCTION task_tables_guards();

SELECT prepare_task_guards(table_name) FROM task_tables;

RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP TRIGGER IF EXISTS task_tables_guards ON task_tables;
DROP FUNCTION IF EXISTS task_tables_guards();
-- +goose StatementBegin
DO $$
DECLARE
  t text;
BEGIN
  FOR t IN SELECT table_name FROM task_tables LOOP
    EXECUTE format('DROP TRIGGER IF EXISTS task_guards ON public.%I', t);
  END LOOP;
END
$$;
-- +goose StatementEnd
DROP FUNCTION IF EXISTS prepare_task_guards(text);
DROP FUNCTION IF EXISTS task_guards_insert();
DROP FUNCTION IF EXISTS check_task_guards(text, jsonb);
DROP FUNCTION IF EXISTS task_unfinished(text, uuid);
DROP TABLE IF EXISTS task_guards;
RESET ROLE;

-- A dead worker's job resumes fast, without a second call (docs/guarantees.md, "A job
-- delivered twice does nothing twice"). Every task table, those registered by
-- prepare_task_table (026_task_tables.sql) from now on included (a trigger on task_tables),
-- gets one lifecycle column:
--   call_deadline  when the external call of the task's latest run ends at the latest: the
--                  begin step sets it (its flow's call time-out from the start) and the call
--                  runs under it. A delivery that finds the task running before that instant
--                  waits for it without spending an attempt (the call of a worker that died
--                  may still land); one after it proceeds. NULL when no fenced call started,
--                  or the last one ended with an error.

-- +goose Up
SET LOCAL ROLE listing_owner;

-- prepare_task_fence gives task table p_table the column above. It runs with its caller's
-- rights (the tables' owner); nobody else may execute it.
-- +goose StatementBegin
CREATE FUNCTION prepare_task_fence(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  rel regclass := format('public.%I', p_table)::regclass;
BEGIN
  EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS call_deadline timestamptz', rel);
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION prepare_task_fence(text) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION task_tables_fence() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM prepare_task_fence(NEW.table_name);
  RETURN NEW;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_tables_fence() FROM PUBLIC;
CREATE TRIGGER task_tables_fence AFTER INSERT ON task_tables
  FOR EACH ROW EXECUTE FUNCTION task_tables_fence();

SELECT prepare_task_fence(table_name) FROM task_tables;

RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP TRIGGER IF EXISTS task_tables_fence ON task_tables;
DROP FUNCTION IF EXISTS task_tables_fence();
-- +goose StatementBegin
DO $$
DECLARE
  t text;
BEGIN
  FOR t IN SELECT table_name FROM task_tables LOOP
    EXECUTE format('ALTER TABLE public.%I DROP COLUMN IF EXISTS call_deadline', t);
  END LOOP;
END
$$;
-- +goose StatementEnd
DROP FUNCTION IF EXISTS prepare_task_fence(text);
RESET ROLE;

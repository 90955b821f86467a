-- No final failure without a completed look (docs/guarantees.md, "Every accepted operation
-- ends"). Every task table, those registered by prepare_task_table (026_task_tables.sql) from
-- now on included (a trigger on task_tables), gets four lifecycle columns:
--   look_code, look_message  the failure a requested last look holds (its flow asks the
--                            upstream whether the work was done after all before it records
--                            one): NULL when no look was requested;
--   looked_at                when that look last completed (asked the upstream and got an
--                            answer): NULL while none did. A failure held by a look is
--                            recorded only once one completed; one that cannot complete
--                            before TASK_MAX_AGE ends OUTCOME_UNKNOWN;
--   look_found               what the completed look found: 'not_done' (the work is not done
--                            upstream: the held failure stands) or 'done' (the task
--                            succeeds).

-- +goose Up
SET LOCAL ROLE listing_owner;

-- prepare_task_looks gives task table p_table the columns above. It runs with its caller's
-- rights (the tables' owner); nobody else may execute it.
-- +goose StatementBegin
CREATE FUNCTION prepare_task_looks(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  rel regclass := format('public.%I', p_table)::regclass;
BEGIN
  EXECUTE format($f$ALTER TABLE %s
    ADD COLUMN IF NOT EXISTS look_code text,
    ADD COLUMN IF NOT EXISTS look_message text,
    ADD COLUMN IF NOT EXISTS looked_at timestamptz,
    ADD COLUMN IF NOT EXISTS look_found text CHECK (look_found IN ('not_done', 'done'))$f$, rel);
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION prepare_task_looks(text) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION task_tables_looks() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM prepare_task_looks(NEW.table_name);
  RETURN NEW;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_tables_looks() FROM PUBLIC;
-- After task_tables_liveness (triggers of one event fire in name order).
CREATE TRIGGER task_tables_looks AFTER INSERT ON task_tables
  FOR EACH ROW EXECUTE FUNCTION task_tables_looks();

SELECT prepare_task_looks(table_name) FROM task_tables;

RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP TRIGGER IF EXISTS task_tables_looks ON task_tables;
DROP FUNCTION IF EXISTS task_tables_looks();
-- +goose StatementBegin
DO $$
DECLARE
  t text;
BEGIN
  FOR t IN SELECT table_name FROM task_tables LOOP
    EXECUTE format('ALTER TABLE public.%I DROP COLUMN IF EXISTS look_code, DROP COLUMN IF EXISTS look_message, DROP COLUMN IF EXISTS looked_at, DROP COLUMN IF EXISTS look_found', t);
  END LOOP;
END
$$;
-- +goose StatementEnd
DROP FUNCTION IF EXISTS prepare_task_looks(text);
RESET ROLE;

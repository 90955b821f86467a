-- Only a run spends an attempt (docs/guarantees.md, "Every accepted operation ends"). Every
-- task table, those registered by prepare_task_table (026_task_tables.sql) from now on
-- included (a trigger on task_tables), gets four lifecycle columns:
--   redeliveries         how often the reconciler delivered the task again although its
--                        handler had not started since the previous delivery (a job lost
--                        with Redis in a backlog): such a delivery spends no attempt; it is
--                        bounded by the task's age (TASK_MAX_AGE) and spaced by a backoff
--                        that grows with this count;
--   reconciled_attempts  the task's attempts when the reconciler last delivered it again: a
--                        task whose attempts still equal it has not run since;
--   first_dispatched_at  when the task's request event was first dispatched (NULL until the
--                        reconciler first meets the task): its age counts from there, so that
--                        work held back in the outbox does not age.
--   held_result          the result of a successful external call whose record step gave
--                        up, as the flow encodes it (JSON); NULL when none is held. The next
--                        delivery records it instead of calling again (docs/guarantees.md, "A
--                        job delivered twice does nothing twice"); a finished task holds none.
--
-- outbox_first_dispatched_at answers the reconciler's third question about a task (beside
-- outbox_owes_task and outbox_last_dispatched_job, 017/018): when was its request event
-- first dispatched, from the log of dispatched events; NULL when the log no longer holds it.

-- +goose Up
SET LOCAL ROLE listing_owner;

-- prepare_task_liveness gives task table p_table the columns above. It runs with its
-- caller's rights (the tables' owner); nobody else may execute it.
-- +goose StatementBegin
CREATE FUNCTION prepare_task_liveness(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  rel regclass := format('public.%I', p_table)::regclass;
BEGIN
  EXECUTE format($f$ALTER TABLE %s
    ADD COLUMN IF NOT EXISTS redeliveries int NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS reconciled_attempts int NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS first_dispatched_at timestamptz,
    ADD COLUMN IF NOT EXISTS held_result jsonb$f$, rel);
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION prepare_task_liveness(text) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION task_tables_liveness() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM prepare_task_liveness(NEW.table_name);
  RETURN NEW;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_tables_liveness() FROM PUBLIC;
CREATE TRIGGER task_tables_liveness AFTER INSERT ON task_tables
  FOR EACH ROW EXECUTE FUNCTION task_tables_liveness();

SELECT prepare_task_liveness(table_name) FROM task_tables;

-- +goose StatementBegin
CREATE FUNCTION outbox_first_dispatched_at(p_aggregate_type text, p_aggregate_id text, p_payload_key text, p_task_id text)
RETURNS timestamptz
LANGUAGE sql STABLE SECURITY INVOKER SET search_path = pg_catalog, public AS $$
  SELECT min(o.dispatched_at) FROM outbox_dispatched o
  WHERE o.aggregate_type = p_aggregate_type AND o.aggregate_id = p_aggregate_id
    AND o.event_payload->>p_payload_key = p_task_id
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION outbox_first_dispatched_at(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_first_dispatched_at(text, text, text, text) TO app_user;

RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP FUNCTION IF EXISTS outbox_first_dispatched_at(text, text, text, text);
DROP TRIGGER IF EXISTS task_tables_liveness ON task_tables;
DROP FUNCTION IF EXISTS task_tables_liveness();
-- +goose StatementBegin
DO $$
DECLARE
  t text;
BEGIN
  FOR t IN SELECT table_name FROM task_tables LOOP
    EXECUTE format('ALTER TABLE public.%I DROP COLUMN IF EXISTS redeliveries, DROP COLUMN IF EXISTS reconciled_attempts, DROP COLUMN IF EXISTS first_dispatched_at, DROP COLUMN IF EXISTS held_result', t);
  END LOOP;
END
$$;
-- +goose StatementEnd
DROP FUNCTION IF EXISTS prepare_task_liveness(text);
RESET ROLE;

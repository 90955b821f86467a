-- Cancelling (POST /v1/workspaces/{ws}/operations/{id}/cancel, docs/http-api.md): a task that
-- has not started ends 'cancelled', and so does its operation.
--   statuses          the task tables' and the operations' status CHECKs allow 'cancelled';
--   <table>_operation an index of each task table by operation_id: the cancel finds an
--                     operation's task with one index descent, whatever the workspace holds;
--   first rules       a cancelled publication or unpublish counts as absent, like a failed
--                     one (publications_first_published, unpublishes_one).
-- Every task table, those registered by prepare_task_table (026_task_tables.sql) from now on
-- included, gets the first two (a trigger on task_tables, as 040 and 053). Ending a task
-- 'cancelled' leaves pending and running: 053's trigger frees its fair-share slot and drops
-- its held events.

-- +goose Up
SET LOCAL ROLE listing_owner;

-- prepare_task_cancel gives task table p_table the status CHECK with 'cancelled' and the
-- index by operation. It runs with its caller's rights (the tables' owner); nobody else may
-- execute it. Idempotent.
-- +goose StatementBegin
CREATE FUNCTION prepare_task_cancel(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  rel regclass := format('public.%I', p_table)::regclass;
  c name;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = rel AND conname = p_table || '_status_cancel') THEN
    FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = rel AND contype = 'c'
               AND pg_get_constraintdef(oid) LIKE '%status%succeeded%failed%' LOOP
      EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', rel, c);
    END LOOP;
    EXECUTE format($f$ALTER TABLE %s ADD CONSTRAINT %I
      CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled'))$f$, rel, p_table || '_status_cancel');
  END IF;
  EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %s (operation_id)', p_table || '_operation', rel);
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION prepare_task_cancel(text) FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION task_tables_cancel() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM prepare_task_cancel(NEW.table_name);
  RETURN NEW;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_tables_cancel() FROM PUBLIC;
CREATE TRIGGER task_tables_cancel AFTER INSERT ON task_tables
  FOR EACH ROW EXECUTE FUNCTION task_tables_cancel();

SELECT prepare_task_cancel(table_name) FROM task_tables;

ALTER TABLE operations DROP CONSTRAINT operations_status_check,
  ADD CONSTRAINT operations_status_check CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled'));

CREATE UNIQUE INDEX publications_first_published_live ON publications (product_id, store_id)
  WHERE status NOT IN ('failed', 'cancelled') AND unpublished_at IS NULL;
DROP INDEX publications_first_published;
ALTER INDEX publications_first_published_live RENAME TO publications_first_published;
CREATE UNIQUE INDEX unpublishes_one_live ON unpublishes (publication_id) WHERE status NOT IN ('failed', 'cancelled');
DROP INDEX unpublishes_one;
ALTER INDEX unpublishes_one_live RENAME TO unpublishes_one;

RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP TRIGGER task_tables_cancel ON task_tables;
DROP FUNCTION task_tables_cancel();
-- Cancelled tasks and operations are recorded failed CANCELLED (the statuses before 056),
-- every workspace's rows, RLS relaxed for the owner for this transaction only.
-- +goose StatementBegin
DO $$
DECLARE
  t text;
BEGIN
  FOR t IN SELECT table_name FROM task_tables LOOP
    EXECUTE format('ALTER TABLE public.%I NO FORCE ROW LEVEL SECURITY', t);
    EXECUTE format($f$UPDATE public.%I SET status = 'failed', error_code = 'CANCELLED',
      error_message = 'the operation was cancelled before it started' WHERE status = 'cancelled'$f$, t);
    EXECUTE format('ALTER TABLE public.%I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE public.%I DROP CONSTRAINT IF EXISTS %I', t, t || '_status_cancel');
    EXECUTE format($f$ALTER TABLE public.%I ADD CONSTRAINT %I
      CHECK (status IN ('pending', 'running', 'succeeded', 'failed'))$f$, t, t || '_status_check');
    EXECUTE format('DROP INDEX IF EXISTS public.%I', t || '_operation');
  END LOOP;
END
$$;
-- +goose StatementEnd
DROP FUNCTION prepare_task_cancel(text);
ALTER TABLE operations NO FORCE ROW LEVEL SECURITY;
UPDATE operations SET status = 'failed', error_code = 'CANCELLED',
    error_message = 'the operation was cancelled before it started' WHERE status = 'cancelled';
ALTER TABLE operations FORCE ROW LEVEL SECURITY;
ALTER TABLE operations DROP CONSTRAINT operations_status_check,
  ADD CONSTRAINT operations_status_check CHECK (status IN ('pending', 'running', 'succeeded', 'failed'));
CREATE UNIQUE INDEX publications_first_published_old ON publications (product_id, store_id)
  WHERE status <> 'failed' AND unpublished_at IS NULL;
DROP INDEX publications_first_published;
ALTER INDEX publications_first_published_old RENAME TO publications_first_published;
CREATE UNIQUE INDEX unpublishes_one_old ON unpublishes (publication_id) WHERE status <> 'failed';
DROP INDEX unpublishes_one;
ALTER INDEX unpublishes_one_old RENAME TO unpublishes_one;
RESET ROLE;

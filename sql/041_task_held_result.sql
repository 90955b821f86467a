-- A held result is recorded, not called again (docs/guarantees.md, "A job delivered twice
-- does nothing twice"). Every task table, those registered by prepare_task_table from now on
-- included, gets
--   held_result  the result of a successful external call whose record step gave up, as the
--                flow encodes it (JSON); NULL when none is held. The next delivery of the
--                task records it instead of calling again; a finished task holds none.
-- prepare_task_liveness (040_task_liveness.sql) adds it from now on.

-- +goose Up
SET LOCAL ROLE listing_owner;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prepare_task_liveness(p_table text) RETURNS void
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

SELECT prepare_task_liveness(table_name) FROM task_tables;

RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
-- +goose StatementBegin
DO $$
DECLARE
  t text;
BEGIN
  FOR t IN SELECT table_name FROM task_tables LOOP
    EXECUTE format('ALTER TABLE public.%I DROP COLUMN IF EXISTS held_result', t);
  END LOOP;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prepare_task_liveness(p_table text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  rel regclass := format('public.%I', p_table)::regclass;
BEGIN
  EXECUTE format($f$ALTER TABLE %s
    ADD COLUMN IF NOT EXISTS redeliveries int NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS reconciled_attempts int NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS first_dispatched_at timestamptz$f$, rel);
END
$$;
-- +goose StatementEnd
RESET ROLE;

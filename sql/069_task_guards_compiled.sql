-- The declared guards compiled: task_guard_refusal (068) ran each guard's condition as
-- dynamic SQL (EXECUTE), parsed and planned again at every call, that is at every task's
-- begin step and every task insert. It is now generated from task_guards, one static
-- statement per guard (planned once per session, as PL/pgSQL caches its statements'
-- plans), and generated again by a trigger whenever task_guards changes (a migration that
-- declares a guard). Same answers, same locks (each checked aggregate's row FOR KEY SHARE),
-- the guards checked in the order of their names. check_task_guards (060) raises what
-- task_guard_refusal answers: the insert trigger's check is compiled too.

-- +goose Up
SET LOCAL ROLE listing_owner;

-- compile_task_guards replaces task_guard_refusal by the check of every row of task_guards.
-- Caller's rights: run by the trigger below as whoever changes task_guards (its owner).
-- +goose StatementBegin
CREATE FUNCTION compile_task_guards() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $compile$
DECLARE
  g task_guards;
  body text := '';
BEGIN
  FOR g IN SELECT * FROM task_guards ORDER BY name LOOP
    body := body || format($f$
  IF p_table IS DISTINCT FROM %2$L AND p_task ->> %1$L IS NOT NULL THEN
    ok := NULL;
    SELECT (%3$s) INTO ok FROM public.%4$I a WHERE a.id = (p_task ->> %1$L)::uuid FOR KEY SHARE OF a;
    IF ok IS NOT TRUE THEN
      RETURN %5$L;
    END IF;
  END IF;$f$, g.task_column, g.except_table, g.holds, g.aggregate_table, g.error_code);
  END LOOP;
  EXECUTE format($f$CREATE OR REPLACE FUNCTION public.task_guard_refusal(p_table text, p_task jsonb) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $compiled$
DECLARE
  ok boolean;
BEGIN%s
  RETURN NULL;
END
$compiled$$f$, body);
END
$compile$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION compile_task_guards() FROM PUBLIC;

-- +goose StatementBegin
CREATE FUNCTION task_guards_changed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM compile_task_guards();
  RETURN NULL;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_guards_changed() FROM PUBLIC;
CREATE TRIGGER task_guards_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON task_guards
  FOR EACH STATEMENT EXECUTE FUNCTION task_guards_changed();
SELECT compile_task_guards();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION check_task_guards(p_table text, p_task jsonb) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  code text := task_guard_refusal(p_table, p_task);
BEGIN
  IF code IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'LKG01', MESSAGE = code, DETAIL = format('a guard on %s', p_table);
  END IF;
END
$$;
-- +goose StatementEnd
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP TRIGGER IF EXISTS task_guards_changed ON task_guards;
DROP FUNCTION IF EXISTS task_guards_changed();
DROP FUNCTION IF EXISTS compile_task_guards();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION task_guard_refusal(p_table text, p_task jsonb) RETURNS text
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
      RETURN g.error_code;
    END IF;
  END LOOP;
  RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION check_task_guards(p_table text, p_task jsonb) RETURNS void
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
RESET ROLE;

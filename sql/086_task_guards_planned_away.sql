-- The guards' check vanishes from the locking read of a task table that no guard binds.
-- The begin step's locking read returns task_guard_refusal('<table>', to_jsonb(t)) (068,
-- compiled by 069): for every job, one PL/pgSQL call and one conversion of the task's row
-- to JSON, even for a table that has none of the columns the guards name (every flow but
-- those of a publication, today).
--
-- task_guard_refusal is now an SQL function, one expression, that the planner inlines:
--   CASE WHEN <a guard binds p_table> THEN task_guard_check(p_table, p_task) END
-- where task_guard_check is the compiled PL/pgSQL check of 069 under its new name. With
-- the table named by a constant, as the locking read names it, the condition is folded
-- when the statement is planned, and for a table no guard binds the column is a constant
-- NULL: neither the call nor to_jsonb(t) is in the plan. A guard binds a table when its
-- except_table is another one and the table has its task_column
-- (task_table_has_any_column, read from the catalog while planning).
--
-- A plan never outlives what it was folded from: compile_task_guards (the trigger on
-- task_guards, 069) replaces task_guard_refusal, which invalidates every cached plan that
-- inlined it (PostgreSQL records the dependency on an inlined function), and a column
-- added to or dropped from the task table invalidates the plans that read the table. So a
-- guard declared, changed or dropped while the service runs binds the next locking read
-- of every session, as before (TestTaskGuardDeclaredAtRunTimeBindsCachedLockingReads).
-- Caller's rights, under RLS, as before; the insert trigger's check (check_task_guards)
-- calls task_guard_check itself.

-- +goose Up
SET LOCAL ROLE listing_owner;

-- task_table_has_any_column reports whether table p_table (of the public schema) has one
-- of the columns p_columns. Declared IMMUTABLE so that the planner folds it (and with it
-- task_guard_refusal's condition) for a constant table; it reads the catalog, which is
-- sound only in a plan that reads p_table itself (the locking read): a change of the
-- table's columns invalidates that plan. Never use it in an index or a constraint.
-- +goose StatementBegin
CREATE FUNCTION task_table_has_any_column(p_table text, p_columns text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog AS $$
  SELECT EXISTS (
    SELECT 1 FROM pg_attribute
    WHERE attrelid = to_regclass('public.' || quote_ident(p_table))
      AND attname = ANY (p_columns) AND attnum > 0 AND NOT attisdropped)
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION task_table_has_any_column(text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION task_table_has_any_column(text, text[]) TO app_user;

-- compile_task_guards replaces task_guard_check (every guard, one static statement each,
-- as 069 compiled them) and task_guard_refusal (the inlinable condition, then the call).
-- Caller's rights: run by the trigger of 069 as whoever changes task_guards (its owner).
-- task_guard_refusal has no SET clause (a function with one is never inlined): its body
-- names schemas itself.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION compile_task_guards() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $compile$
DECLARE
  g task_guards;
  body text := '';
  binds text := '';
  e record;
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
  EXECUTE format($f$CREATE OR REPLACE FUNCTION public.task_guard_check(p_table text, p_task jsonb) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $compiled$
DECLARE
  ok boolean;
BEGIN%s
  RETURN NULL;
END
$compiled$$f$, body);

  -- One term per except_table: the guards it exempts, by their columns.
  FOR e IN SELECT except_table, array_agg(DISTINCT task_column ORDER BY task_column) AS columns
      FROM task_guards GROUP BY except_table ORDER BY except_table NULLS FIRST LOOP
    binds := binds || CASE WHEN binds = '' THEN '' ELSE ' OR ' END || format(
      '(%s public.task_table_has_any_column(p_table, %L::text[]))',
      CASE WHEN e.except_table IS NULL THEN ''
        ELSE format('p_table IS DISTINCT FROM %L AND', e.except_table) END,
      e.columns);
  END LOOP;
  IF binds = '' THEN
    binds := 'false';
  END IF;
  EXECUTE format($f$CREATE OR REPLACE FUNCTION public.task_guard_refusal(p_table text, p_task jsonb) RETURNS text
LANGUAGE sql AS $compiled$
  SELECT CASE WHEN %s THEN public.task_guard_check(p_table, p_task) END
$compiled$$f$, binds);
END
$compile$;
-- +goose StatementEnd

-- task_guard_check is created by the compilation; task_guard_refusal keeps its grants.
SELECT compile_task_guards();
REVOKE ALL ON FUNCTION task_guard_check(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION task_guard_check(text, jsonb) TO app_user;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION check_task_guards(p_table text, p_task jsonb) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  code text := task_guard_check(p_table, p_task);
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION compile_task_guards() RETURNS void
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
SELECT compile_task_guards();
DROP FUNCTION IF EXISTS task_guard_check(text, jsonb);
DROP FUNCTION IF EXISTS task_table_has_any_column(text, text[]);
RESET ROLE;

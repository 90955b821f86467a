-- task_guard_refusal(table, task) is check_task_guards (060) answering instead of raising:
-- the error code of the first declared guard, by name, that does not hold of an aggregate
-- that p_task (a row of task table p_table) names, NULL when every guard holds. It takes the
-- same locks (each checked aggregate's row FOR KEY SHARE, until the transaction ends). The
-- begin step's locking read of a task returns it beside the row: one statement instead of a
-- second read of the row, and a refusal that fails no other step of a group transaction.
-- Caller's rights, under RLS.

-- +goose Up
SET LOCAL ROLE listing_owner;
-- +goose StatementBegin
CREATE FUNCTION task_guard_refusal(p_table text, p_task jsonb) RETURNS text
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
REVOKE ALL ON FUNCTION task_guard_refusal(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION task_guard_refusal(text, jsonb) TO app_user;
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP FUNCTION IF EXISTS task_guard_refusal(text, jsonb);
RESET ROLE;

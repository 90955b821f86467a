-- task_guard_answer(table, task) is check_task_guards (060) answering instead of raising:
-- the error code of the first declared guard, by name, that does not hold of an aggregate
-- that p_task (a row of task table p_table) names, NULL when every guard holds; the same
-- locks (each checked aggregate's row FOR KEY SHARE). The begin step asks it
-- (postgres.TaskGuardAnswers): a refusal leaves the transaction usable, so the task's
-- failure is recorded in it (a raise aborted the transaction, and the task failed INTERNAL
-- after its retries). The insert trigger keeps raising. Caller's rights, under RLS.

-- +goose Up
SET LOCAL ROLE listing_owner;
-- +goose StatementBegin
CREATE FUNCTION task_guard_answer(p_table text, p_task jsonb) RETURNS text
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
REVOKE ALL ON FUNCTION task_guard_answer(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION task_guard_answer(text, jsonb) TO app_user;
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP FUNCTION IF EXISTS task_guard_answer(text, jsonb);
RESET ROLE;

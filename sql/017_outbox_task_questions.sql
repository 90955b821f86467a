-- The two questions the reconciler asks the outbox about a task, each answered by one
-- function so that no other query depends on how the outbox stores its rows:
--
--   outbox_owes_task: does the outbox still owe a delivery of this task's request event
--     (a row pending or being dispatched)? A task it owes is not stuck.
--   outbox_last_dispatched_job: the job id (the event's id) of the task's latest dispatched
--     request event, or NULL; the reconciler asks BullMQ about that job.
--
-- A task's request event is found by its aggregate (type and id) and by the payload field
-- holding the task id (p_payload_key, e.g. 'verification_id'). Both functions are SECURITY
-- INVOKER: they run as the caller, under the caller's RLS, and see the caller's workspace only.

-- +goose Up
SET LOCAL ROLE listing_owner;

-- +goose StatementBegin
CREATE FUNCTION outbox_owes_task(p_aggregate_type text, p_aggregate_id text, p_payload_key text, p_task_id text)
RETURNS boolean
LANGUAGE sql STABLE SECURITY INVOKER SET search_path = pg_catalog, public AS $$
  SELECT EXISTS (
    SELECT 1 FROM outbox_events o
    WHERE o.aggregate_type = p_aggregate_type AND o.aggregate_id = p_aggregate_id
      AND o.event_payload->>p_payload_key = p_task_id
      AND o.status IN ('pending', 'dispatching'))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION outbox_last_dispatched_job(p_aggregate_type text, p_aggregate_id text, p_payload_key text, p_task_id text)
RETURNS uuid
LANGUAGE sql STABLE SECURITY INVOKER SET search_path = pg_catalog, public AS $$
  SELECT o.id FROM outbox_events o
  WHERE o.aggregate_type = p_aggregate_type AND o.aggregate_id = p_aggregate_id
    AND o.event_payload->>p_payload_key = p_task_id
    AND o.status = 'dispatched'
  ORDER BY o.created_at DESC
  LIMIT 1
$$;
-- +goose StatementEnd

REVOKE ALL ON FUNCTION outbox_owes_task(text, text, text, text),
  outbox_last_dispatched_job(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_owes_task(text, text, text, text),
  outbox_last_dispatched_job(text, text, text, text) TO app_user;
RESET ROLE;

-- +goose Down
SET LOCAL ROLE listing_owner;
DROP FUNCTION IF EXISTS outbox_last_dispatched_job(text, text, text, text);
DROP FUNCTION IF EXISTS outbox_owes_task(text, text, text, text);
RESET ROLE;
